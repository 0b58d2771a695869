//! A small W3C WebDriver client (ureq + serde_json) driving Debian's headless `chromium`
//! through `chromedriver`: sessions, navigation, elements by CSS selector, clicks, keys, text,
//! attributes, scripts, screenshots, window size. Every wait is a bounded poll ([`WAIT`]).
//!
//! [`Browser::start`] returns `None` (after saying so loudly) when chromium or chromedriver is
//! missing, unless `GPULEDGER_REQUIRE_BROWSER=1`, which makes that a failure (CI sets it).

use base64::prelude::{Engine, BASE64_STANDARD};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for anything the page does (an element, a text, a download).
pub const WAIT: Duration = Duration::from_secs(20);
/// Longest wait for chromedriver to answer `/status` after it starts.
pub const DRIVER_START: Duration = Duration::from_secs(20);
/// Longest wait for one WebDriver command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// The key W3C WebDriver names element references by.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// Where Debian installs them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver process and one browser session; both end when it is dropped.
pub struct Browser {
    driver: Child,
    agent: ureq::Agent,
    base: String,
    session: String,
    /// Where downloads land.
    pub downloads: PathBuf,
    _profile: tempfile::TempDir,
    _download_dir: tempfile::TempDir,
}

/// An element of the page (its WebDriver reference).
#[derive(Clone, Debug)]
pub struct Element(pub String);

/// A WebDriver error answer, or no answer.
#[derive(Debug)]
pub struct WdError(pub String);

impl std::fmt::Display for WdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn require_browser() -> bool {
    std::env::var("GPULEDGER_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    /// Starts chromedriver and a headless chromium session (a fresh profile, downloads into a
    /// temporary directory, `--no-sandbox` when running as root), or `None` when either program
    /// is missing and `GPULEDGER_REQUIRE_BROWSER` is not `1`.
    pub fn start() -> Option<Browser> {
        for p in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(p).exists() {
                assert!(
                    !require_browser(),
                    "{p} is missing and GPULEDGER_REQUIRE_BROWSER=1: install chromium and chromium-driver"
                );
                eprintln!(
                    "SKIPPED: {p} is missing (apt-get install -y chromium chromium-driver); \
                     the browser tests did not run"
                );
                return None;
            }
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(COMMAND_TIMEOUT))
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            let ready = agent
                .get(&format!("{base}/status"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == json!(true));
            if ready {
                break;
            }
            assert!(
                started.elapsed() < DRIVER_START,
                "chromedriver did not answer /status within {DRIVER_START:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        let download_dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--headless=new".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            "--no-default-browser-check".to_owned(),
            "--disable-extensions".to_owned(),
            "--disable-background-networking".to_owned(),
            "--window-size=1366,900".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        if is_root() {
            args.push("--no-sandbox".to_owned());
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": args,
                "prefs": {
                    "download.default_directory": download_dir.path(),
                    "download.prompt_for_download": false,
                    "download.directory_upgrade": true,
                    "safebrowsing.enabled": false,
                },
            },
            "timeouts": {"script": 30_000, "pageLoad": 30_000, "implicit": 0},
        }}});
        let mut b = Browser {
            driver,
            agent,
            base,
            session: String::new(),
            downloads: download_dir.path().to_owned(),
            _profile: profile,
            _download_dir: download_dir,
        };
        let v = b
            .command("POST", "/session", Some(caps))
            .unwrap_or_else(|e| panic!("a chromium session did not start: {e}"));
        b.session = v["sessionId"].as_str().expect("a session id").to_owned();
        // Headless chromium saves downloads only where told (chromedriver's own command).
        let path = b.downloads.display().to_string();
        let _ = b.session_command(
            "POST",
            "/chromium/send_command",
            Some(json!({"cmd": "Browser.setDownloadBehavior",
                        "params": {"behavior": "allow", "downloadPath": path}})),
        );
        Some(b)
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, WdError> {
        let url = format!("{}{path}", self.base);
        let r = match method {
            "GET" => self.agent.get(&url).call(),
            "DELETE" => self.agent.delete(&url).call(),
            _ => self
                .agent
                .post(&url)
                .send_json(body.unwrap_or_else(|| json!({}))),
        };
        let mut r = r.map_err(|e| WdError(format!("{method} {path}: {e}")))?;
        let status = r.status().as_u16();
        let v: Value = r
            .body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_json()
            .map_err(|e| WdError(format!("{method} {path}: {e}")))?;
        if status >= 400 {
            return Err(WdError(format!(
                "{method} {path}: {status} {}: {}",
                v["value"]["error"], v["value"]["message"]
            )));
        }
        Ok(v["value"].clone())
    }

    fn session_command(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, WdError> {
        self.command(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Opens `url`.
    pub fn navigate(&self, url: &str) {
        self.session_command("POST", "/url", Some(json!({"url": url})))
            .unwrap_or_else(|e| panic!("navigate to {url}: {e}"));
    }

    /// Sets the window's size (CSS pixels).
    pub fn resize(&self, width: u32, height: u32) {
        self.session_command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .unwrap_or_else(|e| panic!("resize: {e}"));
    }

    /// The first element matching `css` now, if any.
    pub fn try_find(&self, css: &str) -> Option<Element> {
        self.session_command(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        )
        .ok()
        .and_then(|v| v[ELEMENT_KEY].as_str().map(|s| Element(s.to_owned())))
    }

    /// Every element matching `css` now.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        self.session_command(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e[ELEMENT_KEY].as_str().map(|s| Element(s.to_owned())))
        .collect()
    }

    /// Waits (bounded by [`WAIT`]) for an element matching `css`.
    pub fn find(&self, css: &str) -> Element {
        self.wait_for(&format!("an element {css}"), || self.try_find(css))
    }

    /// Polls `f` every 100 ms until it gives `Some`, for at most [`WAIT`]; panics with `what`
    /// (and the page's text) after that.
    pub fn wait_for<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if started.elapsed() > WAIT {
                let body = self
                    .try_find("body")
                    .and_then(|b| self.try_text(&b))
                    .unwrap_or_default();
                panic!("waited {WAIT:?} for {what}; the page says:\n{body}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks `el`.
    pub fn click(&self, el: &Element) {
        self.session_command("POST", &format!("/element/{}/click", el.0), Some(json!({})))
            .unwrap_or_else(|e| panic!("click: {e}"));
    }

    /// Types `text` into `el` (a file input takes a path).
    pub fn send_keys(&self, el: &Element, text: &str) {
        self.session_command(
            "POST",
            &format!("/element/{}/value", el.0),
            Some(json!({"text": text})),
        )
        .unwrap_or_else(|e| panic!("send keys: {e}"));
    }

    /// Clears an input.
    pub fn clear(&self, el: &Element) {
        self.session_command("POST", &format!("/element/{}/clear", el.0), Some(json!({})))
            .unwrap_or_else(|e| panic!("clear: {e}"));
    }

    /// The rendered text of `el`, or `None` when it is gone (re-rendered since it was found).
    pub fn try_text(&self, el: &Element) -> Option<String> {
        self.session_command("GET", &format!("/element/{}/text", el.0), None)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
    }

    /// The rendered text of `el`.
    pub fn text(&self, el: &Element) -> String {
        self.try_text(el).expect("element text")
    }

    /// An attribute of `el`, if it has it.
    pub fn attribute(&self, el: &Element, name: &str) -> Option<String> {
        self.session_command("GET", &format!("/element/{}/attribute/{name}", el.0), None)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.session_command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .unwrap_or_else(|e| panic!("script failed: {e}"))
    }

    /// Runs an asynchronous `script` (it calls `arguments[arguments.length - 1]` with its
    /// result) and returns that result.
    pub fn execute_async(&self, script: &str, args: Value) -> Value {
        self.session_command(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
        .unwrap_or_else(|e| panic!("async script failed: {e}"))
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let v = self
            .session_command("GET", "/screenshot", None)
            .unwrap_or_else(|e| panic!("screenshot: {e}"));
        BASE64_STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .expect("base64 PNG")
    }

    /// Saves a PNG of the viewport to `path`.
    pub fn save_screenshot(&self, path: &Path) {
        let png = self.screenshot();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
        std::fs::write(path, png).unwrap();
    }

    /// Waits for a completed download named `name` (no `.crdownload` beside it); its bytes.
    pub fn downloaded(&self, name: &str) -> Vec<u8> {
        let path = self.downloads.join(name);
        let partial = self.downloads.join(format!("{name}.crdownload"));
        self.wait_for(&format!("the download {name}"), || {
            (path.exists() && !partial.exists())
                .then(|| std::fs::read(&path).ok())
                .flatten()
                .filter(|b| !b.is_empty())
        })
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.command("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn is_root() -> bool {
    // `id -u` avoids a libc dependency in the tests.
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .is_some_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
