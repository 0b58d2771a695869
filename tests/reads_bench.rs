//! `gpuledger bench grow` measures what it should: the tenant-month it reads in the grown log is
//! the one it reads in the fresh log, every record of it is priced and certified, and the
//! whole-history read counts every record of the tenant. No timing is asserted. The benchmark
//! is a command of the binary (not part of the server library), so it is run as one.

mod common;

use serde_json::Value;

/// `gpuledger bench grow --json` on the two SQLite logs in `dir`, its report.
fn grow(dir: &std::path::Path, reuse: bool) -> Value {
    let url = |name: &str| format!("sqlite://{}", dir.join(name).display());
    let mut cmd = common::bin();
    cmd.args([
        "bench",
        "grow",
        "--entries",
        "100000",
        "--month-records",
        "8000",
    ])
    .args(["--tenants", "5", "--json"])
    .args(["--database-url", &url("grow.db")])
    .args(["--fresh-database-url", &url("fresh.db")]);
    if reuse {
        cmd.arg("--reuse");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn bench_grow_reads_the_same_tenant_month_in_both_logs() {
    let dir = tempfile::tempdir().unwrap();
    let r = grow(dir.path(), false);
    assert_eq!(r["records"], 100_000);
    // 8,000 in the measured month and 2,000 in each of the other eleven.
    assert_eq!(r["tenant_records"], 8_000 + 11 * 2_000);
    assert_eq!(r["whole_history_records"], r["tenant_records"]);
    for reads in ["grown", "grown_again", "fresh", "fresh_again"] {
        let reads = &r[reads];
        assert_eq!(reads["certificate_records"], 8_000);
        // 4 GPUs (the measured tenant's lease covers half of each 8-GPU node; the tenant a
        // node serves that month leases the other half) × 10 s × 8,000 records = 320,000 GPU-s
        // at 18.5 CNY per GPU-hour.
        assert_eq!(reads["preview_total"], "1644.44");
        assert!(reads["usage_day_records"].as_u64().unwrap() > 0);
    }
    assert_eq!(
        r["grown"]["usage_day_records"],
        r["fresh"]["usage_day_records"]
    );
    assert!(r["grown"]["log_entries"].as_u64().unwrap() > 100_000);
    assert!(r["fresh"]["log_entries"].as_u64().unwrap() > 8_000);
    assert_eq!(r["rate_per_million"].as_array().unwrap().len(), 1);
    assert!(r["bytes_per_entry"].as_f64().unwrap() > 0.0);
    // The same logs measured again, without growing them.
    let again = grow(dir.path(), true);
    assert_eq!(again["grown"]["preview_total"], "1644.44");
    assert_eq!(again["fresh"]["certificate_records"], 8_000);
    assert!(again["rate_per_million"].as_array().unwrap().is_empty());
    assert!(again["first_million_per_s"].is_null());
}
