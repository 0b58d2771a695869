//! The web console at `/console/`: served from the binary with a strict CSP (checked over HTTP,
//! no browser needed), and used in a real browser (Debian's headless chromium through
//! chromedriver, tests/common/webdriver.rs) by a tenant, an auditor and an admin on a demo-like
//! log: charts with data, an invoice PDF downloaded and parsed, a certificate checked PASS in
//! the browser, a tampered bundle FAIL with the reason `gpuledger verify` names, another
//! tenant's invoice not found, entries browsed and checkpoints proven consistent, and Chinese
//! with no untranslated string. Screenshots of each main page go to
//! `target/console-screenshots/`.
//!
//! Without chromium and chromedriver the browser test says SKIPPED, unless
//! `GPULEDGER_REQUIRE_BROWSER=1` (CI), which makes that a failure.

mod common;

use common::webdriver::{Browser, Element};
use common::*;
use ed25519_dalek::SigningKey;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::record::{Body, Energy, GpuUsage, Kind};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The console's source folder.
fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/console")
}

/// Every file under `dir`, as paths relative to it with `/`, sorted.
fn relative_files(dir: &Path) -> Vec<String> {
    files_under(dir)
        .iter()
        .map(|p| {
            p.strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect()
}

/// The keys of a message table (`  "key": "value",` lines of i18n/<locale>.js).
fn table_keys(locale: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(assets().join(format!("i18n/{locale}.js"))).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('"'))
        .filter_map(|l| l.split_once("\":").map(|(k, _)| k.to_owned()))
        .collect()
}

#[test]
fn both_message_tables_have_the_same_keys() {
    let en = table_keys("en");
    let zh = table_keys("zh-CN");
    assert!(
        en.len() > 100,
        "the English table was read ({} keys)",
        en.len()
    );
    let only_en: Vec<_> = en.difference(&zh).collect();
    let only_zh: Vec<_> = zh.difference(&en).collect();
    assert!(
        only_en.is_empty() && only_zh.is_empty(),
        "only in en.js: {only_en:?}; only in zh-CN.js: {only_zh:?}"
    );
}

#[test]
fn console_files_are_served_from_the_binary_with_a_strict_csp() {
    let db = sqlite();
    let log = init(&db);
    let srv = log.serve();
    let h = srv.http();
    // `/` and `/console` send a browser to the console.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    for path in ["/", "/console"] {
        let r = agent.get(&format!("{}{path}", srv.base)).call().unwrap();
        assert_eq!(r.status(), 302, "{path}");
        assert_eq!(r.headers()["location"], "/console/", "{path}");
    }

    // The verifier's Node tests are in the folder but not served.
    assert_eq!(h.get("/console/verify/test/run.mjs", None).status, 404);
    let files: Vec<String> = relative_files(&assets())
        .into_iter()
        .filter(|f| !f.starts_with("verify/test/"))
        .collect();
    assert!(files.contains(&"index.html".to_owned()));
    for f in &files {
        let text = std::fs::read(assets().join(f)).unwrap();
        // Nothing from another host: no absolute URL in any file the console ships.
        // (The SVG namespace is a name, not something loaded.)
        let s = String::from_utf8_lossy(&text).replace("http://www.w3.org/2000/svg", "");
        for scheme in ["http://", "https://", "//cdn", "@import"] {
            assert!(
                !s.contains(scheme),
                "{f} names {scheme}: nothing may load from another host"
            );
        }
        let mut r = agent
            .get(&format!("{}/console/{f}", srv.base))
            .call()
            .unwrap();
        assert_eq!(r.status(), 200, "{f}");
        let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
        let want = match f.rsplit('.').next().unwrap() {
            "html" => "text/html",
            "js" => "text/javascript",
            "css" => "text/css",
            other => panic!("{f}: unexpected kind {other}"),
        };
        assert!(ct.starts_with(want), "{f}: {ct}");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(csp.starts_with("default-src 'self'"), "{f}: {csp}");
        for directive in [
            "script-src 'self'",
            "style-src 'self'",
            "object-src 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{f}: {csp}");
        }
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        assert_eq!(r.headers()["cache-control"], "no-cache");
        let body = r.body_mut().read_to_vec().unwrap();
        assert_eq!(body, text, "{f}: the served bytes are the file's");
        // Revalidation: the same ETag answers 304 without a body.
        let etag = r.headers()["etag"].to_str().unwrap().to_owned();
        let again = agent
            .get(&format!("{}/console/{f}", srv.base))
            .header("If-None-Match", &etag)
            .call()
            .unwrap();
        assert_eq!(again.status(), 304, "{f}");
    }
    // The page itself: no inline script or style (the CSP would block them anyway).
    let index = std::fs::read_to_string(assets().join("index.html")).unwrap();
    assert!(
        !index.contains("<script>") && !index.contains("style="),
        "no inline code"
    );
    assert!(!index.contains("<style"), "no inline style sheet");
    assert_eq!(h.get("/console/", None).status, 200);
    for missing in [
        "/console/nope.js",
        "/console/../Cargo.toml",
        "/console/i18n/../../../Cargo.toml",
    ] {
        let r = h.get(missing, None);
        assert_eq!(r.status, 404, "{missing}");
    }
    // Not API operations: the console is not in the OpenAPI document.
    let doc = h.get("/openapi.json", None).json();
    assert!(doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .all(|p| !p.starts_with("/console") && p != "/"));
}

// ---------------------------------------------------------------------------------------------
// A demo-like log
// ---------------------------------------------------------------------------------------------

const NODE: &str = "node-1";
/// The east node, with the A800s (a record names its node's region).
const NODE_EAST: &str = "node-e";
const NORTH: &str = "cn-north-imx";
const EAST: &str = "cn-east-sh";
const H100: &str = "H100-SXM-80G";
const A800: &str = "A800-80G";
const DAYS: i64 = 5;

/// 00:00 UTC `DAYS` days ago: the first day with usage (all of it inside the console's default
/// "last 30 days").
fn first_day() -> Timestamp {
    let now = Timestamp::now().unix();
    Timestamp::from_unix(now - now % 86_400 - DAYS * 86_400).unwrap()
}

/// The demo's node in `region`: node-1 in the north, node-e in the east.
fn node_in(region: &str) -> &'static str {
    if region == EAST {
        NODE_EAST
    } else {
        NODE
    }
}

/// One hour of `count` GPUs ending at `end`.
#[allow(clippy::too_many_arguments)]
fn gpu(
    key: &SigningKey,
    seq: u64,
    tenant: &str,
    lease: &str,
    region: &str,
    model: &str,
    count: u32,
    end: Timestamp,
) -> Envelope {
    let body = Body::GpuUsage(GpuUsage {
        tenant: tenant.into(),
        lease: Some(lease.into()),
        region: region.into(),
        node: node_in(region).into(),
        gpu_model: model.into(),
        gpu_count: Decimal::from(count),
        start: end.plus(-3600),
        end,
        gpu_seconds: Decimal::from(count) * Decimal::from(3600),
    });
    Envelope::sign(sample::ORIGIN, Kind::GpuUsage, NODE, key, seq, &body)
}

fn energy(
    key: &SigningKey,
    seq: u64,
    tenant: &str,
    region: &str,
    kwh: &str,
    end: Timestamp,
) -> Envelope {
    let body = Body::Energy(Energy {
        tenant: Some(tenant.into()),
        region: region.into(),
        node: node_in(region).into(),
        start: end.plus(-3600),
        end,
        kwh: dec(kwh),
    });
    Envelope::sign(sample::ORIGIN, Kind::Energy, NODE, key, seq, &body)
}

/// What the browser scenarios share: the served log, its tokens and what it holds.
struct Demo<'a> {
    log: Log<'a>,
    srv: Server,
    h: Http,
    auditor: String,
    tenant_a: String,
    tenant_b: String,
    verifier_key: String,
    /// Tenant A's GPU-hours in the last 30 days: on-demand and spot.
    a_on_demand_hours: Decimal,
    a_spot_hours: Decimal,
}

/// The demo's prices, in force from `since`: on-demand rate cards (H100 in the north at 2.5,
/// A800 in the east at 1.8 CNY per GPU-hour) and both regions' parameters.
fn prices(since: Timestamp) -> Vec<Body> {
    use gpuledger::core::rating::LeaseClass;
    use gpuledger::core::record::{RateCard, RegionParameters};
    let cards = [(NORTH, H100, "2.5"), (EAST, A800, "1.8")].map(|(region, model, price)| {
        Body::RateCard(RateCard {
            region: region.into(),
            gpu_model: model.into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: dec(price),
            effective_from: since,
        })
    });
    let params = [(NORTH, "0.28"), (EAST, "0.62")].map(|(region, price)| {
        Body::RegionParams(RegionParameters {
            region: region.into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: dec(price),
            pue: dec("1.08"),
            carbon_g_per_kwh: dec("550"),
            effective_from: since,
        })
    });
    cards.into_iter().chain(params).collect()
}

/// The GPUs of node-1: 16 H100s (node-e has 8 A800s).
const NODE_GPUS: u32 = 16;

/// The demo's leases, open-ended from 2020: A's on-demand lease (8 H100s of node-1 and up to
/// 8 A800s of node-e, whichever), A's spot lease (4 H100s) and B's on-demand lease (H100s 14
/// and 15): 14 of node-1's 16 H100s.
fn leases() -> [Value; 3] {
    let from = Timestamp::from_unix(sample::LEASE_FROM)
        .unwrap()
        .to_string();
    [
        json!({"lease": "lease-tenant-a", "tenant": "tenant-a", "class": "on_demand", "from": from,
               "nodes": [{"node": NODE, "gpu_model": H100, "count": "8"},
                         {"node": NODE_EAST, "gpu_model": A800, "count": "8"}]}),
        json!({"lease": "spot-tenant-a", "tenant": "tenant-a", "class": "spot", "from": from,
               "nodes": [{"node": NODE, "gpu_model": H100, "count": "4"}]}),
        json!({"lease": "lease-tenant-b", "tenant": "tenant-b", "class": "on_demand", "from": from,
               "nodes": [{"node": NODE, "gpus": [14, 15]}]}),
    ]
}

/// Tenants A and B; `node-1` in the north and `node-e` in the east; their leases; five days of A's usage (on-demand in both regions,
/// spot on the last two days) and energy, one hour of B's; prices; one invoice each for the
/// first day (A's INV-000001, B's INV-000002); checkpoints of two sizes.
fn demo(db: &TestDb) -> Demo<'_> {
    let log = init(db);
    let d0 = first_day();
    // The prices, logged first, when they take effect, a day before the usage (no price may
    // take effect more than the policy's skew before it is logged, and receive times never
    // decrease).
    let since = d0.plus(-86_400);
    log.write_at(since, prices(since));
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    // node-1 and node-e, registered before their key and their leases (which name registered
    // nodes only): 16 H100s in the north and 8 A800s in the east, room for every lease below.
    for (node, region, model, count) in [(NODE, NORTH, H100, NODE_GPUS), (NODE_EAST, EAST, A800, 8)]
    {
        let gpus: Vec<Value> = (0..count)
            .map(|i| json!({"index": i, "uuid": format!("GPU-console-{node}-{i}"), "model": model}))
            .collect();
        h.post(
            "/v1/nodes",
            a,
            &json!({"node": node, "region": region, "gpus": gpus, "max_watts_per_gpu": "700"}),
        )
        .ok_json(201);
    }
    for t in ["tenant-a", "tenant-b"] {
        h.post("/v1/tenants", a, &json!({"id": t, "name": t}))
            .ok_json(201);
    }
    // The leases the records below name, none of them overbooking node-1 (PROTOCOL §6.7).
    for lease in leases() {
        h.post("/v1/leases", a, &lease).ok_json(201);
    }
    let key = sample::key("console-node");
    h.post(
        "/v1/signers",
        a,
        &json!({"id": NODE, "role": "node", "public_key": public(&key), "nodes": [NODE, NODE_EAST], "regions": [NORTH, EAST]}),
    )
    .ok_json(201);
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };
    let mut batch = Vec::new();
    let (mut on_demand, mut spot) = (Decimal::ZERO, Decimal::ZERO);
    for i in 0..DAYS {
        let day = d0.plus(i * 86_400);
        let hour = |n: i64| day.plus(n * 3600);
        batch.push(gpu(
            &key,
            next(),
            "tenant-a",
            "lease-tenant-a",
            NORTH,
            H100,
            8,
            hour(2),
        ));
        batch.push(gpu(
            &key,
            next(),
            "tenant-a",
            "lease-tenant-a",
            EAST,
            A800,
            i as u32 + 1,
            hour(4),
        ));
        on_demand += Decimal::from(8 + i + 1);
        batch.push(energy(&key, next(), "tenant-a", NORTH, "5.5", hour(6)));
        batch.push(energy(&key, next(), "tenant-a", EAST, "1.25", hour(7)));
        if i >= 3 {
            batch.push(gpu(
                &key,
                next(),
                "tenant-a",
                "spot-tenant-a",
                NORTH,
                H100,
                4,
                hour(9),
            ));
            spot += Decimal::from(4);
        }
    }
    // Today's usage, in the hour before the last closed hour: inside both pages' default period
    // (the last 30 days ending at the last whole hour at least the 300 s close margin ago), which
    // a period ending at today's midnight would miss. Two GPUs for half an hour: one GPU-hour.
    let closed = Timestamp::now().unix() - 300;
    let hour = Timestamp::from_unix(closed - closed % 3600).unwrap();
    let today = GpuUsage {
        tenant: "tenant-a".into(),
        lease: Some("lease-tenant-a".into()),
        region: NORTH.into(),
        node: NODE.into(),
        gpu_model: H100.into(),
        gpu_count: Decimal::from(2),
        start: hour.plus(-2700),
        end: hour.plus(-900),
        gpu_seconds: Decimal::from(2 * 1800),
    };
    let seq = next();
    batch.push(Envelope::sign(
        sample::ORIGIN,
        Kind::GpuUsage,
        NODE,
        &key,
        seq,
        &Body::GpuUsage(today),
    ));
    on_demand += Decimal::ONE;
    batch.push(gpu(
        &key,
        next(),
        "tenant-b",
        "lease-tenant-b",
        NORTH,
        H100,
        2,
        d0.plus(11 * 3600),
    ));
    let ans = h.post_records(&batch);
    for o in items(&ans["outcomes"]) {
        assert_eq!(o["status"], "accepted", "{o}");
    }
    let verifier_key = h.get("/v1/log", None).ok_json(200)["verifier_key"]
        .as_str()
        .unwrap()
        .to_owned();
    // A checkpoint here, then more entries and another: the history has a real proof to check.
    h.checkpoint_at(h.size(), &verifier_key);
    let (from, to) = (d0.to_string(), d0.plus(86_400).to_string());
    for (t, number) in [("tenant-a", "INV-000001"), ("tenant-b", "INV-000002")] {
        let issued = h
            .post(
                "/v1/invoices",
                a,
                &json!({"tenant": t, "from": from, "to": to}),
            )
            .ok_json(201);
        assert_eq!(issued[0]["number"], number);
    }
    // tenant-a's contract, from now on (after its invoiced day): its invoices page lists it.
    let now = Timestamp::now();
    h.post(
        "/v1/contracts",
        a,
        &json!({"tenant": "tenant-a", "contract": "C-console-a", "currency": "CNY",
                "region": NORTH, "term_from": now.plus(-60).to_string(),
                "term_to": now.plus(365 * 86_400).to_string(), "billing_period": "month",
                "billing_anchor": "calendar", "commitment": "100",
                "fees": [{"name": "Bare metal, monthly", "amount": "9000", "timing": "advance",
                          "category": "compute", "lease": "lease-tenant-a"}],
                "sla": {"target": "99.9", "credits": [{"below": "99.9", "percent": "10"}]}}),
    )
    .ok_json(201);
    // Shortened to 300 days: its invoices page shows the amendment under the term.
    h.post(
        "/v1/contract-amendments",
        a,
        &json!({"tenant": "tenant-a", "contract": "C-console-a",
                "term_to": now.plus(300 * 86_400).to_string(), "reason": "Shortened to 300 days"}),
    )
    .ok_json(201);
    // tenant-a's top-up: its invoices page shows the balance the next invoices draw on. In
    // dollars, so the yuan invoices the admin pages issue and settle below draw nothing.
    h.post(
        "/v1/prepayments",
        a,
        &json!({"tenant": "tenant-a", "reference": "TOPUP-console", "source": "purchase",
                "currency": "USD", "amount": "500.00"}),
    )
    .ok_json(201);
    h.checkpoint_at(h.size(), &verifier_key);
    let auditor = h.secret(
        &admin,
        json!({"role": "auditor", "label": "console auditor"}),
    );
    let tenant_a = h.secret(
        &admin,
        json!({"role": "tenant", "tenant": "tenant-a", "label": "console A"}),
    );
    let tenant_b = h.secret(
        &admin,
        json!({"role": "tenant", "tenant": "tenant-b", "label": "console B"}),
    );
    Demo {
        log,
        srv,
        h,
        auditor,
        tenant_a,
        tenant_b,
        verifier_key,
        a_on_demand_hours: on_demand,
        a_spot_hours: spot,
    }
}

// ---------------------------------------------------------------------------------------------
// The browser
// ---------------------------------------------------------------------------------------------

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn shot(b: &Browser, name: &str) {
    b.save_screenshot(&screenshots().join(format!("{name}.png")));
}

/// Whether the verifier module (assets/console/verify/index.js, written by another change) is
/// here; the in-browser checks need it.
fn verifier_present() -> bool {
    assets().join("verify/index.js").exists()
}

/// Signs in with `token` from a fresh page load (any earlier session forgotten first).
fn sign_in(b: &Browser, base: &str, token: &str, role: &str) {
    b.navigate(&format!("{base}/console/#/signin"));
    b.execute("sessionStorage.clear()", json!([]));
    b.navigate("about:blank");
    b.navigate(&format!("{base}/console/#/signin"));
    let input = b.find("#token");
    b.clear(&input);
    b.send_keys(&input, token);
    b.click(&b.find("#signin-submit"));
    // The header is drawn again as the page settles: read it afresh each time.
    b.wait_for(&format!("signed in as {role}"), || {
        b.try_find(&format!("#whoami[data-role=\"{role}\"]"))
            .and_then(|who| b.attribute(&who, "data-role"))
    });
}

fn sign_out(b: &Browser) {
    b.click(&b.find("#signout"));
    b.find("#token");
    let stored = b.execute("return sessionStorage.length", json!([]));
    assert_eq!(stored, json!(0), "signing out clears the stored token");
}

/// Opens `#/route` and waits until the page says it is ready.
fn open(b: &Browser, base: &str, route: &str) {
    // No stale readiness from the page before.
    b.execute(
        "document.querySelector('main')?.removeAttribute('data-ready')",
        json!([]),
    );
    b.navigate(&format!("{base}/console/#/{route}"));
    let name = route.split(['/', '?']).next().unwrap();
    b.find(&format!("main[data-ready=\"{name}\"]"));
    assert!(
        b.try_find("main .card.error").is_none(),
        "#/{route} shows an error: {}",
        b.text(&b.find("main"))
    );
}

fn attr(b: &Browser, el: &Element, name: &str) -> String {
    b.attribute(el, name).unwrap_or_default()
}

/// The verdict element inside `scope` once a check has finished.
fn verdict(b: &Browser, scope: &str) -> (String, Option<String>) {
    let el = b.find(&format!("{scope} [data-result]"));
    let result = attr(b, &el, "data-result");
    let reason = b
        .try_find(&format!("{scope} [data-reason]"))
        .map(|r| attr(b, &r, "data-reason"));
    (result, reason)
}

/// The witness named in tests/vectors/cosignature (its verifier key): cosigned none of the
/// demo's checkpoints.
fn vector_witness() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/cosignature/witness.vkey");
    std::fs::read_to_string(path).unwrap().trim().to_owned()
}

/// That the PASS in `scope` says, in the verdict itself, that no witness was required and so
/// only the log operator vouches for the checkpoint's history, and how to require witnesses
/// (`hint`: the message key, the console's trust settings or the offline page's fields).
fn says_operator_alone(b: &Browser, scope: &str, hint: &str) {
    let el = b.find(&format!(
        "{scope} [data-result=\"PASS\"] [data-witnesses=\"operator_alone\"]"
    ));
    let text = b.text(&el);
    assert!(
        text.contains("only the log operator vouches") || text.contains("只有日志运营方担保"),
        "{scope}: the operator-alone caveat: {text:?}"
    );
    assert!(
        b.try_find(&format!(
            "{scope} [data-witnesses=\"operator_alone\"] [data-i18n=\"{hint}\"]"
        ))
        .is_some(),
        "{scope}: how to require witnesses ({hint}): {text:?}"
    );
}

#[test]
fn console_in_a_real_browser() {
    let Some(b) = Browser::start() else { return };
    let db = sqlite();
    let d = demo(&db);
    let base = d.srv.base.clone();
    tenant_sees_usage_and_downloads_an_invoice_pdf(&b, &d, &base);
    tenant_cannot_reach_another_tenants_invoice(&b, &d, &base);
    tenant_issues_a_certificate_and_checks_it_in_the_browser(&b, &d, &base);
    auditor_browses_entries_and_sees_consistency(&b, &d, &base);
    tampered_bundle_fails_with_the_verifiers_reason(&b, &d, &base);
    admin_pages(&b, &d, &base);
    chinese_has_no_untranslated_string(&b, &d, &base);
    phone_width(&b, &d, &base);
}

/// Scenario 1: the usage chart's bars carry the tenant's exact GPU-hours; the invoice PDF lands
/// in the download directory and parses.
fn tenant_sees_usage_and_downloads_an_invoice_pdf(b: &Browser, d: &Demo, base: &str) {
    sign_in(b, base, &d.tenant_a, "tenant");
    b.find("main[data-ready=\"usage\"]");
    let bars = b.find_all("svg.chart rect[data-value]");
    assert!(!bars.is_empty(), "the chart has data points");
    let total: Decimal = bars.iter().map(|r| dec(&attr(b, r, "data-value"))).sum();
    assert_eq!(
        total,
        d.a_on_demand_hours + d.a_spot_hours,
        "the bars add up to A's GPU-hours (B's hour is not among them)"
    );
    let series: BTreeSet<String> = bars.iter().map(|r| attr(b, r, "data-series")).collect();
    assert_eq!(series, BTreeSet::from([EAST.to_owned(), NORTH.to_owned()]));
    // Spot and on-demand, from the tenant's leases.
    let parts: Vec<(String, Decimal)> = b
        .find_all("svg.share rect[data-value]")
        .iter()
        .map(|r| (attr(b, r, "data-series"), dec(&attr(b, r, "data-value"))))
        .collect();
    assert_eq!(
        parts,
        vec![
            ("On-demand".to_owned(), d.a_on_demand_hours),
            ("Spot".to_owned(), d.a_spot_hours)
        ]
    );
    // One row per region and GPU model, with GPU-hours and kWh together (energy records name
    // a node, whose only GPU model they are shown with).
    let totals: Vec<Vec<String>> = serde_json::from_value(b.execute(
        "return [...document.querySelectorAll('#usage-totals tbody tr')]\
           .map(r => [...r.cells].map(c => c.innerText.trim()))",
        json!([]),
    ))
    .unwrap();
    assert_eq!(
        totals
            .iter()
            .map(|r| (r[0].as_str(), r[1].as_str()))
            .collect::<Vec<_>>(),
        vec![(EAST, A800), (NORTH, H100)],
        "one row per region and GPU model: {totals:?}"
    );
    for r in &totals {
        assert!(
            r[2] != "0" && r[4] != "0",
            "GPU-hours and kWh on the same row: {r:?}"
        );
    }
    // The period-to-date estimate is the invoice preview's, labelled as an estimate.
    let period = attr(
        b,
        &b.find("#estimate [data-estimate-period]"),
        "data-estimate-period",
    );
    let (from, to) = period.split_once('/').unwrap();
    let preview =
        d.h.get(
            &format!("/v1/invoices/preview?from={from}&to={to}"),
            Some(&d.tenant_a),
        )
        .ok_json(200);
    let shown: Vec<(String, String)> = b
        .find_all("#estimate [data-estimate]")
        .iter()
        .map(|e| (attr(b, e, "data-currency"), attr(b, e, "data-estimate")))
        .collect();
    let want: Vec<(String, String)> = items(&preview["currencies"])
        .iter()
        .map(|c| {
            (
                c["currency"].as_str().unwrap().to_owned(),
                c["total"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        shown, want,
        "the estimate is the preview's total per currency"
    );
    // Tall enough for the estimate, the chart and the totals (docs/console.png is this one).
    b.resize(1366, 1500);
    shot(b, "tenant-usage");
    b.resize(1366, 900);
    // By GPU model, kWh, hourly: the page follows the picker.
    open(b, base, "usage?window=hour&metric=kwh&by=gpu_model");
    assert!(!b.find_all("svg.chart rect[data-value]").is_empty());

    open(b, base, "invoices");
    let rows = b.find_all("#invoices a[data-invoice]");
    let numbers: Vec<String> = rows.iter().map(|r| b.text(r)).collect();
    assert_eq!(numbers, vec!["INV-000001"], "A sees its own invoice only");
    let contracts = b.find_all("#contracts tbody tr");
    assert_eq!(contracts.len(), 1, "A's contract is listed");
    let row = b.text(&contracts[0]);
    assert!(
        row.contains("C-console-a") && row.contains("Bare metal, monthly"),
        "{row}"
    );
    // Its amendment, under the term.
    let amended = b.find("#contracts [data-amendment]");
    assert!(
        b.text(&amended).contains("Shortened to 300 days"),
        "{}",
        b.text(&amended)
    );
    // Its SLA on the lease the fee rents, as the contract states it.
    let target = b.find("#contracts [data-sla-target]");
    assert_eq!(
        b.attribute(&target, "data-sla-target").as_deref(),
        Some("99.9")
    );
    assert!(
        row.contains("lease-tenant-a") && row.contains("99.9"),
        "{row}"
    );
    let available = b.text(&b.find("#prepaid [data-prepaid-available]"));
    assert!(
        available.contains("500.00"),
        "A's prepaid balance: {available}"
    );
    let lot = b.text(&b.find("#prepaid tbody tr"));
    assert!(lot.contains("TOPUP-console"), "{lot}");
    shot(b, "tenant-invoices");
    b.click(&b.find("#invoices button[data-download=\"pdf\"]"));
    let pdf = b.downloaded("INV-000001.pdf");
    let doc = lopdf::Document::load_mem(&pdf).expect("the downloaded PDF parses");
    assert!(!doc.get_pages().is_empty(), "the PDF has pages");
    let served =
        d.h.get("/v1/invoices/INV-000001/pdf", Some(&d.tenant_a))
            .body;
    assert_eq!(pdf.len(), served.len(), "the download is the served PDF");
    open(b, base, "invoices/INV-000001");
    let lines = b.find_all("#invoice-lines tbody tr");
    let served =
        d.h.get("/v1/invoices/INV-000001", Some(&d.tenant_a))
            .ok_json(200);
    assert_eq!(
        lines.len(),
        items(&served["lines"]).len(),
        "every line is shown"
    );
    // The browser recomputes the invoice from its bundle (verify/invoice.js): PASS, and no
    // "invoice amounts not checked" note.
    if verifier_present() {
        b.click(&b.find("#invoice-check-button"));
        let (result, reason) = verdict(b, "#invoice-check");
        assert_eq!(result, "PASS", "the invoice's check: reason {reason:?}");
        assert!(
            b.try_find("#invoice-check [data-not-checked]").is_none(),
            "an invoice's check checks its amounts"
        );
    }
    shot(b, "tenant-invoice");
}

/// Scenario 4: A edits the URL to B's invoice number: the page says not found, exactly as for
/// a number that does not exist (the API answers 404 for both).
fn tenant_cannot_reach_another_tenants_invoice(b: &Browser, d: &Demo, base: &str) {
    assert_eq!(
        d.h.get("/v1/invoices/INV-000002", Some(&d.tenant_b)).status,
        200,
        "B's invoice exists"
    );
    for number in ["INV-000002", "INV-999999"] {
        b.navigate(&format!("{base}/console/#/invoices/{number}"));
        b.find("#not-found");
        let text = b.text(&b.find("main"));
        assert!(!text.contains("tenant-b"), "nothing of B shows: {text}");
    }
    shot(b, "tenant-not-found");
}

/// Scenario 2: the tenant issues a certificate from the page and the browser checks it: PASS.
fn tenant_issues_a_certificate_and_checks_it_in_the_browser(b: &Browser, d: &Demo, base: &str) {
    open(b, base, "certificates");
    b.click(&b.find("#issue-certificate"));
    let issued = b.find("[data-issued]");
    let id = attr(b, &issued, "data-issued");
    assert_eq!(
        d.h.get(&format!("/v1/certificates/{id}"), Some(&d.tenant_a))
            .status,
        200,
        "the certificate {id} was issued"
    );
    if !verifier_present() {
        assert!(
            std::env::var("GPULEDGER_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "assets/console/verify/index.js is missing"
        );
        eprintln!(
            "SKIPPED: the in-browser check (assets/console/verify/index.js is not there yet)"
        );
        return;
    }
    // The default period (the last 30 days ending at the last closed hour) holds all of A's
    // usage, today's included.
    let cert =
        d.h.get(&format!("/v1/certificates/{id}"), Some(&d.tenant_a))
            .ok_json(200);
    assert_eq!(
        dec(cert["totals"]["gpu_seconds"].as_str().unwrap()),
        (d.a_on_demand_hours + d.a_spot_hours) * Decimal::from(3600),
        "the default certificate period covers today's usage: {}",
        cert["period_to"]
    );
    b.click(&b.find(&format!("button[data-check=\"{id}\"]")));
    let (result, reason) = verdict(b, &format!("[id=\"check-{id}\"]"));
    assert_eq!(result, "PASS", "the in-browser check: reason {reason:?}");
    // The verdict says what the browser did not check, and that its code came from the server.
    let scope = format!("[id=\"check-{id}\"]");
    assert!(
        b.try_find(&format!("{scope} [data-not-checked]")).is_some(),
        "the verdict names what was not checked"
    );
    // No witness in the trust settings: the PASS says the operator alone vouches (#23).
    says_operator_alone(b, &scope, "verdict_require_witnesses");
    // The certificate's own page says the same.
    open(b, base, &format!("certificates/{id}"));
    b.click(&b.find(&format!("button[data-check=\"{id}\"]")));
    let (result, reason) = verdict(b, &scope);
    assert_eq!(
        result, "PASS",
        "the certificate page's check: reason {reason:?}"
    );
    says_operator_alone(b, &scope, "verdict_require_witnesses");
    shot(b, "tenant-certificates");
    sign_out(b);
}

/// Scenario 5: the auditor pages through decoded entries and sees the checkpoint history
/// proven consistent in the browser.
fn auditor_browses_entries_and_sees_consistency(b: &Browser, d: &Demo, base: &str) {
    sign_in(b, base, &d.auditor, "auditor");
    b.find("main[data-ready=\"log\"]");
    let size = d.h.size();
    open(b, base, "entries");
    let rows = b.find_all("#entries tbody tr");
    assert_eq!(rows.len() as u64, size.min(50), "the newest page");
    assert!(
        !b.find_all("#entries [data-kind=\"gpu_usage\"]").is_empty(),
        "usage records decoded"
    );
    shot(b, "auditor-entries");
    open(b, base, "entries?start=20");
    assert_eq!(
        b.find_all("#entries tbody tr").len() as u64,
        (size - 20).min(50)
    );
    let first = b.find("#entries tbody tr td");
    assert_eq!(b.text(&first), "20");
    b.click(&b.find("#entries-prev"));
    b.wait_for("the page before", || {
        // The range may be re-rendered between finding it and reading it.
        let t = b
            .try_find("#entries-range")
            .and_then(|e| b.try_text(&e))
            .unwrap_or_default();
        t.starts_with("Entries 0").then_some(())
    });
    open(b, base, "keys");
    assert!(!b.find_all("#key-events tbody tr").is_empty());
    shot(b, "auditor-keys");
    if !verifier_present() {
        eprintln!("SKIPPED: the in-browser consistency checks (no verifier module yet)");
        return;
    }
    open(b, base, "log");
    let (result, _) = verdict(b, "#consistency-summary");
    assert_eq!(result, "PASS");
    let proven = b.find_all("#checkpoints [data-consistency=\"PASS\"]");
    assert!(
        proven.len() >= 2,
        "at least one real consistency proof and the first checkpoint"
    );
    assert!(b
        .find_all("#checkpoints [data-consistency=\"FAIL\"]")
        .is_empty());
    // The key id of the served key, whatever its base64 holds ('+' included).
    let want_id = d.verifier_key.split('+').nth(1).unwrap();
    assert_eq!(
        b.text(&b.find("#log-key-id")),
        want_id,
        "the log page's key id"
    );
    let (cp, _) = verdict(b, "#checkpoint-result");
    assert_eq!(cp, "PASS", "the latest checkpoint's signature");
    // No witness required: the checkpoint's PASS, every consistency PASS and the history's
    // verdict say that the operator alone vouches.
    says_operator_alone(b, "#checkpoint-result", "verdict_require_witnesses");
    says_operator_alone(b, "#consistency-summary", "verdict_require_witnesses");
    assert_eq!(
        b.find_all("#checkpoints [data-consistency=\"PASS\"][data-witnesses=\"operator_alone\"]")
            .len(),
        proven.len(),
        "every consistency PASS was checked with no witness required"
    );
    shot(b, "auditor-log");
}

/// Scenario 3: a bundle with one changed byte, dropped on the auditor's drop zone: FAIL with
/// the reason `gpuledger verify` gives for the same file; the untouched bundle passes.
fn tampered_bundle_fails_with_the_verifiers_reason(b: &Browser, d: &Demo, base: &str) {
    open(b, base, "verify");
    shot(b, "auditor-verify");
    if !verifier_present() {
        eprintln!("SKIPPED: the drop zone check (no verifier module yet)");
        sign_out(b);
        return;
    }
    let certs = d.h.get("/v1/certificates", Some(&d.tenant_a)).ok_json(200);
    let id = items(&certs)[0]["id"].as_str().unwrap().to_owned();
    let bundle =
        d.h.get(&format!("/v1/certificates/{id}/bundle"), Some(&d.tenant_a))
            .text();
    let dir = d.log.dir.path();
    let good = dir.join("good.bundle.jsonl");
    std::fs::write(&good, &bundle).unwrap();
    // One usage record of A claims one GPU more (its leaf no longer matches the proof).
    let tampered = bundle.replacen("\"gpu_count\":\"8\"", "\"gpu_count\":\"9\"", 1);
    assert_ne!(tampered, bundle, "the bundle holds a record to tamper with");
    let bad = dir.join("tampered.bundle.jsonl");
    std::fs::write(&bad, &tampered).unwrap();
    let out = bin()
        .args(["verify", "--bundle"])
        .arg(&bad)
        .args(["--log-key", &d.verifier_key, "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).expect("verify --json");
    assert_eq!(report["result"], "FAIL");
    let want = report["reason"].as_str().unwrap().to_owned();

    let input = b.find("#bundle-file");
    b.send_keys(&input, good.to_str().unwrap());
    let (result, reason) = verdict(b, "#verify-result");
    assert_eq!(result, "PASS", "the untouched bundle: {reason:?}");
    says_operator_alone(b, "#verify-result", "verdict_require_witnesses");
    let progress = b.find("#verify-progress");
    assert_eq!(
        attr(b, &progress, "value"),
        attr(b, &progress, "max"),
        "progress reached the end"
    );
    // A witness in the trust settings that cosigned nothing here: the same bundle fails the
    // quorum (witness_quorum, as `gpuledger verify --witness` says), never a PASS.
    b.execute(
        "localStorage.setItem('gpuledger.console.trust', JSON.stringify({logKey: '', witnesses: [arguments[0]], quorum: 1}))",
        json!([vector_witness()]),
    );
    b.execute(
        "document.getElementById('verify-result').replaceChildren()",
        json!([]),
    );
    // (Another file name: choosing the same file again changes nothing, so checks nothing.)
    let again = dir.join("good-again.bundle.jsonl");
    std::fs::write(&again, &bundle).unwrap();
    let input = b.find("#bundle-file");
    b.send_keys(&input, again.to_str().unwrap());
    let (result, reason) = verdict(b, "#verify-result");
    assert_eq!(result, "FAIL", "a required witness that did not cosign");
    assert_eq!(reason.as_deref(), Some("witness_quorum"));
    assert!(b.try_find("#verify-result [data-witnesses]").is_none());
    b.execute(
        "localStorage.removeItem('gpuledger.console.trust')",
        json!([]),
    );
    // With the quorum met, a PASS names the witnesses that cosigned, and no operator-alone
    // caveat (the verdict as shown for a verifier result of that shape).
    let shown = b.execute_async(
        r#"const done = arguments[arguments.length - 1];
import('/console/lib/trust.js').then((trust) => {
  const el = document.createElement('div');
  trust.showResult(el, {ok: true, steps: [], summary: {witnesses: {required: 1, found: 1,
    cosigned_by: [{name: 'witness.example/w1', key_id: '0a1b2c3d', timestamp: 1}]}}}, {source: 'pasted'});
  const w = el.querySelector('[data-witnesses]');
  done({witnesses: w && w.dataset.witnesses, by: w && w.dataset.cosignedBy, text: w && w.textContent,
        alone: el.textContent.includes('only the log operator')});
}).catch((e) => done({error: String(e)}));"#,
        json!([]),
    );
    assert_eq!(shown["witnesses"], "cosigned", "{shown}");
    assert_eq!(shown["by"], "witness.example/w1", "{shown}");
    assert!(
        shown["text"]
            .as_str()
            .unwrap_or("")
            .contains("witness.example/w1"),
        "the verdict names the witness: {shown}"
    );
    assert_eq!(shown["alone"], false, "{shown}");
    // Choose the tampered file (the page clears the old verdict first).
    b.execute(
        "document.getElementById('verify-result').replaceChildren()",
        json!([]),
    );
    let input = b.find("#bundle-file");
    b.send_keys(&input, bad.to_str().unwrap());
    let (result, reason) = verdict(b, "#verify-result");
    assert_eq!(result, "FAIL");
    assert_eq!(
        reason.as_deref(),
        Some(want.as_str()),
        "the browser names the reason gpuledger verify names"
    );
    shot(b, "auditor-verify-fail");
    sign_out(b);

    // The offline page (a copy of the console's files on the user's computer, or served here)
    // checks the certificate and bundle against a pasted key, with no sign-in.
    let cert =
        d.h.get(&format!("/v1/certificates/{id}"), Some(&d.tenant_a))
            .text();
    let cert_file = dir.join("certificate.json");
    std::fs::write(&cert_file, &cert).unwrap();
    b.navigate(&format!("{base}/console/offline.html"));
    b.find("main[data-ready=\"offline\"]");
    b.send_keys(&b.find("#offline-certificate"), cert_file.to_str().unwrap());
    b.send_keys(&b.find("#offline-bundle"), good.to_str().unwrap());
    b.send_keys(&b.find("#offline-key"), &d.verifier_key);
    b.click(&b.find("#offline-check"));
    let (result, reason) = verdict(b, "#offline-result");
    assert_eq!(result, "PASS", "the offline page: {reason:?}");
    says_operator_alone(b, "#offline-result", "verdict_require_witnesses_offline");
    shot(b, "offline");
    b.send_keys(&b.find("#offline-bundle"), bad.to_str().unwrap());
    b.execute(
        "document.getElementById('offline-result').replaceChildren()",
        json!([]),
    );
    b.click(&b.find("#offline-check"));
    let (result, reason) = verdict(b, "#offline-result");
    assert_eq!(result, "FAIL");
    assert_eq!(reason.as_deref(), Some(want.as_str()));

    // An invoice and its bundle, offline: PASS as issued; with a line's net raised (its tax,
    // gross and the totals kept consistent) the recomputation names the line, as
    // `gpuledger verify --invoice` does.
    let invoice = d.h.get("/v1/invoices/INV-000001", Some(&d.tenant_a)).text();
    let invoice_bundle = dir.join("invoice.bundle.jsonl");
    std::fs::write(
        &invoice_bundle,
        d.h.get("/v1/invoices/INV-000001/bundle", Some(&d.tenant_a))
            .body,
    )
    .unwrap();
    let mut forged: serde_json::Value = serde_json::from_str(&invoice).unwrap();
    let raise = |v: &mut serde_json::Value| {
        let n = dec(v.as_str().unwrap()) + Decimal::ONE;
        *v = json!(format!("{n:.2}"));
    };
    raise(&mut forged["lines"][0]["net"]);
    raise(&mut forged["lines"][0]["gross"]);
    raise(&mut forged["net_total"]);
    raise(&mut forged["total"]);
    let mut checked = Vec::new();
    for (name, text) in [("issued", invoice), ("forged", forged.to_string())] {
        let file = dir.join(format!("{name}.invoice.json"));
        std::fs::write(&file, text).unwrap();
        b.navigate(&format!("{base}/console/offline.html"));
        b.find("main[data-ready=\"offline\"]");
        b.send_keys(&b.find("#offline-invoice"), file.to_str().unwrap());
        b.send_keys(&b.find("#offline-bundle"), invoice_bundle.to_str().unwrap());
        b.send_keys(&b.find("#offline-key"), &d.verifier_key);
        b.click(&b.find("#offline-check"));
        checked.push(verdict(b, "#offline-result"));
    }
    assert_eq!(
        checked[0].0, "PASS",
        "the issued invoice: {:?}",
        checked[0].1
    );
    assert_eq!(
        (checked[1].0.as_str(), checked[1].1.as_deref()),
        ("FAIL", Some("claim_mismatch")),
        "the forged invoice"
    );
    shot(b, "offline-invoice-fail");
}

/// The admin's pages load and show the log's data.
fn admin_pages(b: &Browser, d: &Demo, base: &str) {
    sign_in(b, base, &d.log.admin, "admin");
    b.find("main[data-ready=\"tenants\"]");
    let tenants: Vec<String> = b
        .find_all("#tenants tbody tr td:first-child")
        .iter()
        .map(|c| b.text(c))
        .collect();
    assert_eq!(tenants, vec!["tenant-a", "tenant-b"]);
    shot(b, "admin-tenants");
    for (route, table) in [
        ("signers", "#signers"),
        ("tokens", "#tokens"),
        ("prices", "#rate-cards"),
        ("ingest", "#rejections"),
        ("witnesses", "#witnesses"),
    ] {
        open(b, base, route);
        b.find(table);
        shot(b, &format!("admin-{route}"));
    }
    admin_fleet(b, d, base);
    admin_billing(b, d, base);
    open(b, base, "prices");
    assert_eq!(
        b.find_all("#rate-cards tbody tr").len(),
        2,
        "two rate cards in force"
    );
    open(b, base, "ingest");
    let rate = b.text(&b.find("#ingest-rate"));
    assert!(rate.contains("per second"), "{rate}");
    // A tenant's pages are not the admin's: the route is not found.
    b.navigate(&format!("{base}/console/#/usage"));
    b.find("#not-found");
    sign_out(b);
}

/// The fleet page lists node-1 with its GPUs by model and its leases, registers a node from
/// pasted `nvidia-smi` lines, and shows the API's problem for a node registered already.
fn admin_fleet(b: &Browser, d: &Demo, base: &str) {
    open(b, base, "fleet");
    let node1 = "#nodes details[data-node=\"node-1\"]";
    assert_eq!(attr(b, &b.find(node1), "data-gpus"), NODE_GPUS.to_string());
    assert_eq!(
        b.text(&b.find(&format!("{node1} summary"))),
        format!("16 × {H100}")
    );
    // The Leases column: node-1's three leases, each with what it covers of the node.
    let leases: Vec<String> = serde_json::from_value(b.execute(
        "const row = document.querySelector(arguments[0]).closest('tr');\
         return [...row.querySelectorAll('ul[data-leases] li')].map(li => li.innerText.trim());",
        json!([node1]),
    ))
    .unwrap();
    assert_eq!(leases.len(), 3, "{leases:?}");
    for (shown, (id, covers)) in leases.iter().zip([
        ("lease-tenant-a", format!("up to 8 × {H100}")),
        ("spot-tenant-a", format!("up to 4 × {H100}")),
        ("lease-tenant-b", "GPUs 14, 15".to_owned()),
    ]) {
        assert!(
            shown.starts_with(id) && shown.ends_with(&covers),
            "{id} covering {covers}: {shown:?}"
        );
    }
    shot(b, "admin-fleet");
    let register = |node: &str| {
        set_value(b, "#node-id", node);
        set_value(b, "#node-region", EAST);
        set_value(b, "#node-watts", "350");
        set_value(
            b,
            "#node-gpus",
            &format!("0, GPU-{node}-a, {A800}\n1 GPU-{node}-b {A800}\n"),
        );
        b.click(&b.find("form:has(#node-id) button[type=submit]"));
    };
    register("node-2");
    b.find("#nodes details[data-node=\"node-2\"][data-gpus=\"2\"]");
    let nodes = d.h.get("/v1/nodes", Some(&d.log.admin)).ok_json(200);
    let two = items(&nodes["nodes"])
        .iter()
        .find(|n| n["node"] == "node-2")
        .expect("node-2 registered");
    assert_eq!(two["gpus"][1]["uuid"], "GPU-node-2-b", "{two}");
    assert_eq!(two["region"], EAST, "{two}");
    // node-1 again: the API's conflict shows in the form.
    register("node-1");
    let problem = b.find("form:has(#node-id) [data-problem]");
    assert_eq!(attr(b, &problem, "data-status"), "409");
    // node-2 updated: a third GPU, partitioned into 7 MIG instances, and 400 W.
    let update = |gpus: &str, watts: &str| {
        set_value(b, "#upd-node", "node-2");
        set_value(b, "#upd-gpus", gpus);
        set_value(b, "#upd-watts", watts);
        b.click(&b.find("form:has(#upd-node) button[type=submit]"));
    };
    update(&format!("2 GPU-node-2-c {A800} mig=7:1g.10gb*7"), "400");
    b.find("#nodes details[data-node=\"node-2\"][data-gpus=\"3\"]");
    b.find("#nodes [data-mig=\"7:1g.10gb*7\"]");
    let nodes = d.h.get("/v1/nodes", Some(&d.log.admin)).ok_json(200);
    let two = items(&nodes["nodes"])
        .iter()
        .find(|n| n["node"] == "node-2")
        .expect("node-2 listed");
    assert_eq!(two["max_watts_per_gpu"], "400", "{two}");
    assert_eq!(
        two["gpus"][2]["mig"],
        json!({"slices": 7, "instances": [{"profile": "1g.10gb", "count": 7}]}),
        "{two}"
    );
    let at = two["updates"][0]["index"].to_string();
    assert_eq!(
        attr(b, &b.find("#nodes [data-updates]"), "data-updates"),
        at
    );
    // A power limit that does not rise: the API's problem shows in the form.
    update("", "300");
    let problem = b.find("form:has(#upd-node) [data-problem]");
    assert_eq!(attr(b, &problem, "data-status"), "400");
}

/// Sets a form control's value as a person would (the date pickers take no typed keys in
/// every locale).
fn set_value(b: &Browser, selector: &str, value: &str) {
    b.execute(
        "const el = document.querySelector(arguments[0]); el.value = arguments[1]; \
         el.dispatchEvent(new Event('change', {bubbles: true}));",
        json!([selector, value]),
    );
}

/// The admin issues a sub-day invoice, records a payment, sees an overpayment refused with the
/// API's problem, grants a credit note, records a top-up (and sees the same reference refused)
/// and sets a low-balance alert, all from the billing page; the tenant's list shows the sub-day
/// period with its times.
fn admin_billing(b: &Browser, d: &Demo, base: &str) {
    open(b, base, "billing");
    shot(b, "admin-billing");
    // Twelve hours of the second day: its on-demand usage is priced.
    let from = first_day().plus(86_400);
    let to = from.plus(12 * 3600);
    let local = |t: Timestamp| t.to_string()[..16].to_owned();
    set_value(b, "#issue-tenant", "tenant-a");
    set_value(b, "#issue-from", &local(from));
    set_value(b, "#issue-to", &local(to));
    b.click(&b.find("form:has(#issue-tenant) button[type=submit]"));
    let issued = b.find("[data-issued-invoices]");
    let number = attr(b, &issued, "data-issued-invoices");
    assert!(number.starts_with("INV-"), "issued {number}");
    // The page reloads its lists; the new invoice is then in the payment form.
    b.wait_for("the new invoice in the payment form", || {
        b.try_find(&format!("#payment-invoice option[value=\"{number}\"]"))
    });
    // A period of twelve hours reads with its times, not "Dec 1 – Dec 1".
    let row: String = serde_json::from_value(b.execute(
        "return [...document.querySelectorAll('#billing-invoices tbody tr')]\
           .find(r => r.cells[0].innerText.trim() === arguments[0]).cells[2].innerText",
        json!([number]),
    ))
    .unwrap();
    assert!(
        row.contains("UTC") && row.contains("12:00"),
        "the period with its times: {row}"
    );
    let inv =
        d.h.get(&format!("/v1/invoices/{number}"), Some(&d.log.admin))
            .ok_json(200);
    let total = dec(inv["total"].as_str().unwrap());
    assert!(total > Decimal::ONE, "a priced invoice: {total}");
    set_value(b, "#payment-invoice", &number);
    set_value(b, "#payment-amount", "1");
    b.click(&b.find("form:has(#payment-invoice) button[type=submit]"));
    b.find("[data-recorded=\"payment\"]");
    // More than the open balance, without "excess becomes credit": the API's problem shows.
    set_value(
        b,
        "#payment-amount",
        &(total * Decimal::from(10)).to_string(),
    );
    b.click(&b.find("form:has(#payment-invoice) button[type=submit]"));
    let problem = b.find("form:has(#payment-invoice) [data-problem]");
    assert_eq!(attr(b, &problem, "data-problem"), "overpayment");
    assert_eq!(attr(b, &problem, "data-status"), "422");
    shot(b, "admin-billing-problem");
    set_value(b, "#credit-invoice", &number);
    set_value(b, "#credit-amount", "0.5");
    b.click(&b.find("form:has(#credit-invoice) button[type=submit]"));
    b.find("[data-recorded=\"credit\"]");
    let acct =
        d.h.get(
            &format!("/v1/invoices/{number}/account"),
            Some(&d.log.admin),
        )
        .ok_json(200);
    assert_eq!(dec(acct["paid"].as_str().unwrap()), Decimal::ONE, "{acct}");
    assert_eq!(
        dec(acct["credited"].as_str().unwrap()),
        dec("0.5"),
        "{acct}"
    );
    // A top-up for tenant-a, in dollars (the yuan invoices draw nothing of it): recorded, and
    // the tenant's balance below the forms counts it beside the 500.00 recorded at the start.
    set_value(b, "#topup-tenant", "tenant-a");
    set_value(b, "#topup-reference", "TOPUP-admin");
    set_value(b, "#topup-source", "purchase");
    set_value(b, "#topup-currency", "USD");
    set_value(b, "#topup-amount", "75.00");
    b.click(&b.find("form:has(#topup-reference) button[type=submit]"));
    b.find("[data-recorded=\"prepayment\"]");
    let available = b.find("#billing-prepaid [data-prepaid-available][data-currency=\"USD\"]");
    assert_eq!(
        dec(&attr(b, &available, "data-prepaid-available")),
        dec("575.00"),
        "tenant-a's dollar balance after the top-up"
    );
    // The same reference again: recorded once, the API's problem shows.
    set_value(b, "#topup-reference", "TOPUP-admin");
    b.click(&b.find("form:has(#topup-reference) button[type=submit]"));
    let refused = b.find("form:has(#topup-reference) [data-problem]");
    assert_eq!(attr(b, &refused, "data-problem"), "conflict");
    assert_eq!(attr(b, &refused, "data-status"), "409");
    // A low-balance alert in dollars: the thresholds are read, merged and put back.
    set_value(b, "#alert-tenant", "tenant-a");
    set_value(b, "#alert-currency", "USD");
    set_value(b, "#alert-threshold", "10");
    b.click(&b.find("form:has(#alert-threshold) button[type=submit]"));
    b.find("[data-recorded=\"alerts\"]");
    let alerts =
        d.h.get("/v1/tenants/tenant-a/alerts", Some(&d.log.admin))
            .ok_json(200);
    assert_eq!(
        dec(alerts["low_balance"]["USD"].as_str().unwrap()),
        dec("10"),
        "{alerts}"
    );
    // tenant-a's contract shortened again, to 200 days from now, in the form.
    let to = Timestamp::now().plus(200 * 86_400).to_string();
    set_value(b, "#amend-tenant", "tenant-a");
    set_value(b, "#amend-contract", "C-console-a");
    set_value(b, "#amend-to", &to[..16]);
    set_value(b, "#amend-reason", "Ended early by mutual agreement");
    b.click(&b.find("form:has(#amend-contract) button[type=submit]"));
    let recorded = b.find("[data-recorded=\"amendment\"]");
    let listed =
        d.h.get("/v1/contracts?tenant=tenant-a", Some(&d.log.admin))
            .ok_json(200);
    let c = &listed["contracts"][0];
    assert_eq!(
        (
            c["term_to"].as_str(),
            c["amendments"].as_array().map(Vec::len)
        ),
        (attr(b, &recorded, "data-term-to").as_str().into(), Some(2)),
        "{listed}"
    );
    // Ending it in the past is refused, and the API's problem shows.
    set_value(b, "#amend-to", "2020-01-01T00:00");
    b.click(&b.find("form:has(#amend-contract) button[type=submit]"));
    let refused = b.find("form:has(#amend-contract) [data-problem]");
    assert_eq!(attr(b, &refused, "data-status"), "400");
    shot(b, "admin-billing-prepaid");
}

/// The check run in the page: every visible text node (and placeholder, label, title) is marked
/// translated or data, and none is an English message the Chinese table translates.
const UNTRANSLATED_SCRIPT: &str = r#"
const done = arguments[arguments.length - 1];
Promise.all([import('/console/i18n/en.js'), import('/console/i18n/zh-CN.js')]).then(([en, zh]) => {
  const E = en.default, Z = zh.default;
  const keysE = Object.keys(E).sort().join(), keysZ = Object.keys(Z).sort().join();
  const differs = Object.keys(E).filter(k => E[k] !== Z[k]);
  const exact = new Set(differs.map(k => E[k].trim()));
  const esc = s => s.replace(/[.*+?^$()|[\]\\]/g, '\\$&');
  const patterns = differs.filter(k => E[k].includes('{')).map(k =>
    new RegExp('^' + esc(E[k].trim()).replace(/\\?\{\w+\\?\}/g, '.*').replace(/\{\w+\}/g, '.*') + '$'));
  const english = s => exact.has(s) || patterns.some(p => p.test(s));
  const bad = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let checked = 0;
  while (walker.nextNode()) {
    const n = walker.currentNode;
    const text = n.nodeValue.trim();
    if (!text || !/[A-Za-z]/.test(text)) continue;
    const el = n.parentElement;
    if (!el || el.closest('noscript, script, style')) continue;
    const shown = el.closest('option') || el.closest('svg') || el.getClientRects().length > 0;
    if (!shown) continue;
    checked++;
    if (!el.closest('[data-i18n], [data-raw]')) bad.push('unmarked: ' + text);
    else if (english(text)) bad.push('english: ' + text);
  }
  for (const el of document.querySelectorAll('[placeholder], [aria-label], [title]'))
    for (const a of ['placeholder', 'aria-label', 'title']) {
      const v = el.getAttribute(a);
      if (v && english(v.trim())) bad.push(a + ': ' + v);
    }
  done({bad, checked, lang: document.documentElement.lang, sameKeys: keysE === keysZ, title: document.title});
}).catch(e => done({error: String(e)}));
"#;

fn assert_translated(b: &Browser, page: &str) {
    let r = b.execute_async(UNTRANSLATED_SCRIPT, json!([]));
    assert!(r["error"].is_null(), "{page}: {r}");
    assert_eq!(r["lang"], "zh-CN", "{page}: <html lang>");
    assert_eq!(r["sameKeys"], true, "both tables have the same keys");
    assert!(
        r["checked"].as_u64().unwrap() > 0,
        "{page}: text was checked"
    );
    assert_eq!(r["bad"], json!([]), "{page}: untranslated strings");
}

/// Scenario 6: switched to Chinese (remembered across a reload), no page of any role shows an
/// untranslated string.
fn chinese_has_no_untranslated_string(b: &Browser, d: &Demo, base: &str) {
    b.navigate(&format!("{base}/console/#/signin"));
    b.click(&b.find("#lang option[value=\"zh-CN\"]"));
    b.find("html[lang=\"zh-CN\"]");
    assert_translated(b, "sign-in");
    let pages: [(&str, &str, &str, &[&str]); 3] = [
        (
            &d.tenant_a,
            "tenant",
            "usage",
            &[
                "usage",
                "invoices",
                "invoices/INV-000001",
                "invoices/INV-000002",
                "certificates",
                "log",
            ],
        ),
        (
            &d.auditor,
            "auditor",
            "log",
            &["log", "entries", "fleet", "keys", "verify"],
        ),
        (
            &d.log.admin,
            "admin",
            "tenants",
            &[
                "tenants",
                "fleet",
                "signers",
                "tokens",
                "prices",
                "billing",
                "witnesses",
                "ingest",
            ],
        ),
    ];
    for (token, role, home, routes) in pages {
        sign_in(b, base, token, role);
        b.find(&format!("main[data-ready=\"{home}\"]"));
        // Remembered: sign_in loaded the page afresh, and it is still in Chinese.
        b.find("html[lang=\"zh-CN\"]");
        for route in routes {
            if route == &home {
                // Already shown (a hash that does not change loads nothing).
                if *route == "log" && verifier_present() {
                    // The checkpoint's PASS says, in Chinese, that the operator alone vouches.
                    says_operator_alone(b, "#checkpoint-result", "verdict_require_witnesses");
                    let el = b.find("#checkpoint-result [data-witnesses=\"operator_alone\"]");
                    let text = b.text(&el);
                    assert!(text.contains("只有日志运营方担保"), "in Chinese: {text:?}");
                    says_operator_alone(b, "#consistency-summary", "verdict_require_witnesses");
                }
                assert_translated(b, route);
                shot(b, &format!("{role}-{route}-zh"));
                continue;
            }
            b.execute(
                "document.querySelector('main')?.removeAttribute('data-ready')",
                json!([]),
            );
            b.navigate(&format!("{base}/console/#/{route}"));
            if route.ends_with("INV-000002") {
                b.find("#not-found");
            } else {
                let name = route.split('/').next().unwrap();
                b.find(&format!("main[data-ready=\"{name}\"]"));
            }
            assert_translated(b, route);
            shot(b, &format!("{role}-{}-zh", route.replace('/', "-")));
        }
        sign_out(b);
    }
    // Back to English for what follows.
    b.click(&b.find("#lang option[value=\"en\"]"));
    b.find("html[lang=\"en\"]");
}

/// The tenant's dashboard at a phone's width: nothing wider than the screen.
fn phone_width(b: &Browser, d: &Demo, base: &str) {
    sign_in(b, base, &d.tenant_a, "tenant");
    b.find("main[data-ready=\"usage\"]");
    b.resize(390, 844);
    let overflow = b.execute(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
        json!([]),
    );
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "no horizontal scrolling at 390 px: {overflow}"
    );
    // The chart is drawn again for the phone: few bucket labels, each readable (its glyphs at
    // least 9 px tall on the screen, not the wide drawing's 11 px shrunk by half).
    let chart: Value = b.execute(
        "const svg = document.querySelector('svg.chart');\
         const labels = [...svg.querySelectorAll('text.axis')];\
         return {layout: svg.dataset.layout, labels: labels.length,\
                 minHeight: Math.min(...labels.map(l => l.getBoundingClientRect().height))};",
        json!([]),
    );
    assert_eq!(chart["layout"], "compact", "{chart}");
    assert!(chart["labels"].as_u64().unwrap() <= 5 + 4, "{chart}");
    assert!(chart["minHeight"].as_f64().unwrap() >= 9.0, "{chart}");
    shot(b, "tenant-usage-phone");
    b.execute(
        "document.querySelector('svg.chart').scrollIntoView()",
        json!([]),
    );
    shot(b, "tenant-usage-phone-chart");
    open(b, base, "certificates");
    shot(b, "tenant-certificates-phone");
    open(b, base, "invoices");
    shot(b, "tenant-invoices-phone");
    b.resize(1366, 900);
}
