//! Usage rollups (issue #28, "rollups"), on SQLite and PostgreSQL: the per-hour buckets written
//! with the records answer every usage query exactly as reading every record does (periods on
//! and off the hour, inside one hour, every window and grouping, one tenant or all, energy with
//! and without a tenant, records that run past their hour); verify-log recomputes them from the
//! leaves and names a bucket altered (its sums, or the latest end of its records), removed or
//! invented; a log whose rollups are gone (as one
//! written before them) is rolled up again when the ledger opens, to the same rows.

mod common;

use common::billing::{acme_on_h100, acme_present, acme_usage, size_of, t};
use common::*;
use gpuledger::core::record::{Body, Energy};
use gpuledger::core::time::Timestamp;
use gpuledger::core::usage::{Aggregator, GroupBy, UsageRow, Window};
use gpuledger::store::verify::{verify_log, VerifyError};
use gpuledger::store::{rollups, usage, Ledger};

/// Both answers to one usage query: from the rollups (and the records of partial hours), and
/// from every record.
fn both(
    ledger: &Ledger,
    tenant: Option<&str>,
    (from, to): (Timestamp, Timestamp),
    group_by: &[GroupBy],
    window: Option<Window>,
) -> (Vec<UsageRow>, Vec<UsageRow>) {
    ledger
        .reads()
        .run(|c| {
            let mut fast = Aggregator::new(from, to, group_by.to_vec(), window);
            usage::aggregate(c, tenant, from, to, &mut fast)?;
            let mut slow = Aggregator::new(from, to, group_by.to_vec(), window);
            usage::aggregate_records(c, tenant, from, to, &mut slow)?;
            Ok((fast.finish(), slow.finish()))
        })
        .unwrap()
}

/// Runs `sql` on the database at `url`.
fn execute(url: &str, sql: &str) -> usize {
    let mut c = gpuledger::store::connect(url).unwrap();
    diesel::RunQueryDsl::execute(diesel::sql_query(sql), &mut c).unwrap()
}

/// The first failure verify-log names: reason and message.
fn verify_fails(url: &str) -> (String, String) {
    let mut c = gpuledger::store::connect(url).unwrap();
    match verify_log(&mut c, None, &mut |_, _| {}) {
        Err(VerifyError::Bad(f)) => (f.first().reason.to_owned(), f.first().what.clone()),
        other => panic!("verify-log should fail: {other:?}"),
    }
}

both_backends!(
    rollups_answer_usage_queries_as_the_records_do,
    |db: &TestDb| {
        let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
        let node = acme_on_h100(&ledger);
        // Records on and off the hour, one running past its hour, and two days of the agent's.
        let mut seq = 0;
        for (from, to, count) in [
            ("2027-01-01T00:00:00Z", "2027-01-01T00:30:00Z", 2),
            ("2027-01-01T00:30:00Z", "2027-01-01T02:15:00Z", 1),
            ("2027-01-01T02:15:07Z", "2027-01-01T02:15:20Z", 2),
            ("2027-01-01T03:59:50Z", "2027-01-01T04:00:00Z", 1),
        ] {
            seq += 1;
            acme_usage(&ledger, &node, seq, t(from), t(to), count);
        }
        acme_present(
            &ledger,
            &node,
            &mut seq,
            ("2027-01-01T04:00:00Z", "2027-01-03T00:00:00Z"),
            2,
        );
        // Energy of the node, of acme's lease and of no tenant.
        for (i, (end, tenant)) in [
            ("2027-01-03T00:10:00Z", Some("acme")),
            ("2027-01-03T00:20:00Z", None),
            ("2027-01-03T01:10:00Z", Some("acme")),
        ]
        .into_iter()
        .enumerate()
        {
            let end = t(end);
            ledger.set_clock(Some(end));
            let body = Body::Energy(Energy {
                tenant: tenant.map(str::to_owned),
                region: "west".into(),
                node: "node-1".into(),
                start: end.plus(-600),
                end,
                kwh: dec(["0.1", "0.05", "0.123456789"][i]),
            });
            seq += 1;
            assert_accepted(
                &ledger
                    .append(vec![signed("node-1", &node, seq, &body)])
                    .unwrap(),
            );
        }

        let groupings: [&[GroupBy]; 3] = [
            &[],
            &[GroupBy::Node, GroupBy::GpuModel],
            &[
                GroupBy::Region,
                GroupBy::Node,
                GroupBy::GpuModel,
                GroupBy::Lease,
            ],
        ];
        let mut compared = 0;
        for period in [
            ("2027-01-01T00:00:00Z", "2027-01-04T00:00:00Z"),
            ("2027-01-01T00:20:00Z", "2027-01-02T13:47:13Z"),
            ("2027-01-01T00:20:00Z", "2027-01-01T00:50:00Z"),
            ("2027-01-01T02:00:00Z", "2027-01-01T03:00:00Z"),
            ("2027-01-02T23:59:59Z", "2027-01-03T01:00:01Z"),
        ] {
            let period = (t(period.0), t(period.1));
            for tenant in [Some("acme"), None] {
                for group_by in groupings {
                    for window in [
                        None,
                        Some(Window::Hour),
                        Some(Window::Day),
                        Some(Window::Month),
                    ] {
                        let (fast, slow) = both(&ledger, tenant, period, group_by, window);
                        assert_eq!(fast, slow, "{period:?} {tenant:?} {group_by:?} {window:?}");
                        compared += usize::from(!slow.is_empty());
                    }
                }
            }
        }
        assert!(compared > 80, "only {compared} non-empty answers compared");
        // The whole span: every record and kWh, exactly.
        let (fast, _) = both(
            &ledger,
            None,
            (t("2027-01-01T00:00:00Z"), t("2027-01-04T00:00:00Z")),
            &[],
            None,
        );
        assert_eq!(
            (
                fast[0].gpu_seconds.to_string(),
                fast[0].kwh.to_string(),
                fast[0].usage_records,
                fast[0].energy_records
            ),
            (
                (2 * 1800 + 6300 + 2 * 13 + 10 + 2 * 44 * 3600).to_string(),
                "0.273456789".to_string(),
                4 + 2,
                3
            )
        );
        let size = size_of(&ledger);
        assert_eq!(verified(&db.url).size, size);

        // verify-log names a bucket altered, removed or invented, and the rollups' size.
        let rows = |ledger: &Ledger| ledger.reads().run(rollups::stored).unwrap();
        let before = rows(&ledger);
        let hour = t("2027-01-01T00:00:00Z").unix();
        let bucket = format!("tenant = 'acme' AND hour = {hour} AND kind = 'gpu_usage'");
        assert_eq!(
            execute(
                &db.url,
                &format!("UPDATE usage_rollups SET records = records + 1 WHERE {bucket}")
            ),
            1
        );
        let (reason, what) = verify_fails(&db.url);
        assert_eq!(reason, "rollup", "{what}");
        assert!(what.contains("the leaves give"), "{what}");
        execute(
            &db.url,
            &format!("UPDATE usage_rollups SET records = records - 1 WHERE {bucket}"),
        );
        assert_eq!(verified(&db.url).size, size);
        // A latest end moved on (rating would trust it to keep a price change out).
        execute(
            &db.url,
            &format!("UPDATE usage_rollups SET last_end = last_end - 60 WHERE {bucket}"),
        );
        let (reason, what) = verify_fails(&db.url);
        assert_eq!(reason, "rollup", "{what}");
        assert!(what.contains("ending by"), "{what}");
        execute(
            &db.url,
            &format!("UPDATE usage_rollups SET last_end = last_end + 60 WHERE {bucket}"),
        );
        assert_eq!(verified(&db.url).size, size);
        execute(
            &db.url,
            &format!(
                "INSERT INTO usage_rollups VALUES ('ghost', {hour}, 'gpu_usage', 'west', \
                 'node-1', 'H100', '', 3600000000000, 1, {})",
                hour + 3600
            ),
        );
        let (reason, what) = verify_fails(&db.url);
        assert_eq!(reason, "rollup");
        assert!(what.contains("matches no record"), "{what}");
        execute(&db.url, "DELETE FROM usage_rollups WHERE tenant = 'ghost'");
        execute(
            &db.url,
            &format!("DELETE FROM usage_rollups WHERE {bucket}"),
        );
        let (reason, what) = verify_fails(&db.url);
        assert_eq!(reason, "rollup");
        assert!(what.contains("is missing"), "{what}");

        // Gone altogether, as in a log from before the rollups: not checked (nothing to check),
        // and rolled up again, to the same rows, when the ledger opens.
        execute(&db.url, "DELETE FROM usage_rollups");
        execute(&db.url, "UPDATE rollup_state SET size = 0");
        assert_eq!(verified(&db.url).size, size);
        drop(ledger);
        let ledger = Ledger::open_at(&db.url, log_key(), t("2027-01-04T00:00:00Z")).unwrap();
        assert_eq!(rows(&ledger), before);
        assert_eq!(verified(&db.url).size, size);
    }
);
