//! Private PostgreSQL clusters for the tests that stop, kill or fail over a database (never
//! the shared one): `initdb` into a temporary directory on a free port, started with
//! `pg_ctl`, run as the `postgres` user when the tests run as root; a streaming standby made
//! with `pg_basebackup -R`, promoted with `pg_ctl promote`; its WAL receiver stalled with
//! SIGSTOP, as a link between two sites stalls, and killed (what it had received but not
//! written is lost with it; the standby restarts its recovery from its own WAL).

use std::path::PathBuf;
use std::process::Command;

/// Skips a test that cannot run here, loudly, or fails it where it must run
/// (`GPULEDGER_REQUIRE_OUTAGE_TESTS=1`, set by `.ci/run`).
pub fn skip(what: &str, why: &str) {
    if std::env::var("GPULEDGER_REQUIRE_OUTAGE_TESTS").as_deref() == Ok("1") {
        panic!("GPULEDGER_REQUIRE_OUTAGE_TESTS=1 but {what} cannot run: {why}");
    }
    eprintln!("\n*** SKIPPED {what}: {why} ***\n");
}

/// Runs a command to completion; the error says what it printed.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

pub fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// One private cluster; stopped (`-m immediate`) when dropped.
pub struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
    as_postgres: bool,
}

impl PrivatePostgres {
    /// A directory and a free port for a cluster, and the server binaries.
    fn place() -> Result<PrivatePostgres, String> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|e| format!("/usr/lib/postgresql: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .find(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
            .ok_or("no initdb and pg_ctl under /usr/lib/postgresql/*/bin")?;
        let as_postgres = running_as_root();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        if as_postgres {
            // initdb refuses to run as root: the cluster belongs to the postgres user.
            run(Command::new("chown").arg("postgres").arg(dir.path()))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        Ok(PrivatePostgres {
            bin,
            dir,
            port,
            as_postgres,
        })
    }

    /// initdb into a temporary directory and start it on a free port; `Err` says why not.
    pub fn start() -> Result<PrivatePostgres, String> {
        PrivatePostgres::start_with("")
    }

    /// [`PrivatePostgres::start`] with `conf` appended to its postgresql.conf first.
    pub fn start_with(conf: &str) -> Result<PrivatePostgres, String> {
        let pg = PrivatePostgres::place()?;
        run(pg
            .command("initdb")
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "-D"])
            .arg(pg.data()))?;
        pg.append_conf(conf)?;
        pg.start_again()?;
        Ok(pg)
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), started and connected.
    pub fn standby_of(primary: &PrivatePostgres) -> Result<PrivatePostgres, String> {
        let pg = PrivatePostgres::place()?;
        run(pg
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "-D"])
            .arg(pg.data()))?;
        pg.start_again()?;
        Ok(pg)
    }

    fn append_conf(&self, conf: &str) -> Result<(), String> {
        use std::io::Write;
        if conf.is_empty() {
            return Ok(());
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("postgresql.conf"))
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .map_err(|e| e.to_string())
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    /// `host:port` of this cluster, for a multi-host URL.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the cluster and waits until it accepts connections.
    pub fn start_again(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-o", &opts, "-w", "-t", "60", "-l"])
            .arg(self.dir.path().join("postgres.log"))
            .arg("start"))
        .map(|_| ())
    }

    /// Stops it the hard way: `-m immediate` (no checkpoint, every backend killed).
    pub fn stop_immediate(&self) {
        run(self.command("pg_ctl").arg("-D").arg(self.data()).args([
            "-m",
            "immediate",
            "-w",
            "stop",
        ]))
        .unwrap();
    }

    /// Promotes a standby and waits until it takes writes.
    pub fn promote(&self) {
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-t", "60", "promote"]))
        .unwrap();
    }

    /// One value of `sql` on this cluster (psql).
    pub fn query(&self, sql: &str) -> String {
        run(Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-XAtc", sql]))
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_owned()
    }

    /// Waits until the cluster answers a query again (after a crash restart).
    pub fn wait_accepting(&self) {
        let t = std::time::Instant::now();
        while run(Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-XAtc", "SELECT 1"]))
        .is_err()
        {
            assert!(t.elapsed().as_secs() < 60, "the cluster does not answer");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Sends `signal` (STOP, CONT, KILL) to this standby's WAL receiver.
    pub fn signal_wal_receiver(&self, signal: &str) {
        let pid = self.query("SELECT pid FROM pg_stat_wal_receiver");
        assert!(!pid.is_empty(), "no WAL receiver on the standby");
        run(Command::new("kill").arg(format!("-{signal}")).arg(&pid)).unwrap();
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .output();
    }
}
