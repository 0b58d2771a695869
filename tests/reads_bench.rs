//! `gpuledger bench grow` measures what it should: the tenant-month it reads in the grown log is
//! the one it reads in the fresh log, every record of it is priced and certified, and the
//! whole-history read counts every record of the tenant. No timing is asserted.

use gpuledger::bench::grow::{run_grow, GrowBench};

#[test]
fn bench_grow_reads_the_same_tenant_month_in_both_logs() {
    let dir = tempfile::tempdir().unwrap();
    let url = |name: &str| format!("sqlite://{}", dir.path().join(name).display());
    let cfg = GrowBench {
        database_url: url("grow.db"),
        fresh_database_url: url("fresh.db"),
        entries: 100_000,
        month_records: 8_000,
        tenants: 5,
        reuse: false,
    };
    let r = run_grow(&cfg, &|_| {}).unwrap();
    assert_eq!(r.records, 100_000);
    // 8,000 in the measured month and 2,000 in each of the other eleven.
    assert_eq!(r.tenant_records, 8_000 + 11 * 2_000);
    assert_eq!(r.whole_history_records, r.tenant_records);
    for reads in [&r.grown, &r.grown_again, &r.fresh, &r.fresh_again] {
        assert_eq!(reads.certificate_records, 8_000);
        // 8 GPUs × 10 s × 8,000 records = 640,000 GPU-s at 18.5 CNY per GPU-hour.
        assert_eq!(reads.preview_total, "3288.89");
        assert!(reads.usage_day_records > 0);
    }
    assert_eq!(r.grown.usage_day_records, r.fresh.usage_day_records);
    assert!(r.grown.log_entries > 100_000 && r.fresh.log_entries > 8_000);
    assert_eq!(r.rate_per_million.len(), 1);
    assert!(r.bytes_per_entry > 0.0);
    // The same logs measured again, without growing them.
    let again = run_grow(&GrowBench { reuse: true, ..cfg }, &|_| {}).unwrap();
    assert_eq!(again.grown.preview_total, "3288.89");
    assert_eq!(again.fresh.certificate_records, 8_000);
    assert!(again.rate_per_million.is_empty() && again.first_million_per_s.is_none());
}
