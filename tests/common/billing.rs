//! A small billing world shared by the contract, prepaid and SLA tests (issue #28): node-1 in
//! `west` with a node key, tenant acme leasing two of its H100s on demand at 18.50 CNY an
//! hour from 2027-01-01, usage records of it, and the committed invoice fixtures that
//! verifiers/python rechecks.

use super::{assert_accepted, dec, ensure_node_in, lease_with, log_key, signed, signer_for};
use ed25519_dalek::SigningKey;
use gpuledger::core::invoice::{Invoice, InvoiceDoc, Period};
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::record::{
    Body, ContractRegistered, GpuUsage, RateCard, Role, Sla, SlaStep, TenantRegistered,
};
use gpuledger::core::time::Timestamp;
use gpuledger::store::{Ledger, StoreError};

/// A timestamp as the wire writes it.
pub fn t(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

/// The period `[from, to)`.
pub fn period(from: &str, to: &str) -> Period {
    Period {
        from: t(from),
        to: t(to),
    }
}

/// Cents as an amount with two decimals (`-30000` → `-300.00`): the tests' own spelling.
pub fn money(c: impl Into<i128>) -> String {
    let c: i128 = c.into();
    let sign = if c < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
}

/// Half-even rounding of `num / den` cents (both non-negative): the tests' own arithmetic,
/// not the crate's rating.
pub fn cents(num: i128, den: i128) -> i128 {
    let (q, r) = (num / den, num % den);
    match (2 * r).cmp(&den) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

/// `reason field` of a ledger entry a rule refused (`conflict <message>` for an id or a
/// reference taken, the API's 409); panics on anything else.
pub fn refused(r: Result<u64, StoreError>) -> String {
    match r {
        Err(StoreError::Rejected(r)) => format!("{} {}", r.reason.code(), r.field.unwrap()),
        Err(StoreError::AlreadyExists(m)) => format!("conflict {m}"),
        other => panic!("not refused by a rule: {other:?}"),
    }
}

/// The reason and field (`reason field`) a contract's body is refused with once `edit` has
/// changed its JSON: the body rules of docs/PROTOCOL.md §5.19.
pub fn refused_contract(c: ContractRegistered, edit: &dyn Fn(&mut serde_json::Value)) -> String {
    let mut v = Body::ContractRegistered(c).to_value();
    edit(&mut v);
    let kind = gpuledger::core::record::Kind::ContractRegistered;
    let r = Body::from_value(kind, &v).unwrap_err();
    format!("{} {}", r.reason.code(), r.field.unwrap())
}

/// acme's invoice for `[from, to)`, issued at `at` (the ledger's clock is set there): the one
/// currency's.
pub fn acme_invoice(ledger: &Ledger, at: &str, (from, to): (&str, &str)) -> Invoice {
    ledger.set_clock(Some(t(at)));
    let mut issued = ledger
        .issuance()
        .invoices("acme", period(from, to))
        .unwrap();
    assert_eq!(issued.len(), 1, "one currency");
    issued.remove(0)
}

/// The SLA the tests hold leases to: 99.9 %, a 10 % credit below it, 25 % below 99 %.
pub fn sla_99_9() -> Sla {
    Sla {
        target: dec("99.9"),
        credits: vec![
            SlaStep {
                below: dec("99.9"),
                percent: dec("10"),
            },
            SlaStep {
                below: dec("99"),
                percent: dec("25"),
            },
        ],
    }
}

/// Asserts that an invoice of acme for `[from, to)` is refused for splitting a billing period
/// of `contract` (`contract_period_split`), writing nothing.
pub fn assert_split_refused(ledger: &Ledger, from: &str, to: &str, contract: &str) {
    let size = size_of(ledger);
    let split = ledger.issuance().invoices("acme", period(from, to));
    assert!(
        matches!(&split, Err(StoreError::ContractPeriodSplit(m)) if m.contains(contract)),
        "{split:?}"
    );
    assert_eq!(size_of(ledger), size);
}

/// The payloads of the webhook deliveries to `endpoint`, in the order they were enqueued.
pub fn payloads(ledger: &Ledger, endpoint: &str) -> Vec<serde_json::Value> {
    ledger
        .reads()
        .run(|c| gpuledger::store::webhooks::deliveries(c, endpoint))
        .unwrap()
        .into_iter()
        .map(|d| serde_json::from_str(&d.payload).unwrap())
        .collect()
}

/// Registers node-1 in `west` (with its key, returned), tenant acme, its on-demand lease of
/// two H100s of node-1, and the H100 rate card of 18.50 CNY an hour from 2027-01-01.
pub fn acme_on_h100(ledger: &Ledger) -> SigningKey {
    ensure_node_in(ledger, "node-1", "west");
    let node = signer_for(ledger, "node-1", Role::Node, &["node-1"]);
    ledger
        .append_ledger_entry(Body::TenantRegistered(TenantRegistered {
            tenant: "acme".into(),
        }))
        .unwrap();
    lease_with(
        ledger,
        &gpuledger::sample::lease("acme"),
        "acme",
        LeaseClass::OnDemand,
        &[("node-1", "H100", 2)],
    );
    ledger
        .append_ledger_entry(Body::RateCard(RateCard {
            region: "west".into(),
            gpu_model: "H100".into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: dec("18.5"),
            effective_from: Timestamp::parse("2027-01-01T00:00:00Z").unwrap(),
        }))
        .unwrap();
    node
}

/// `hours` H100-hours of acme on node-1 (one GPU) from `start`, as record `seq`, logged at
/// its end (the ledger's clock is set there).
pub fn use_h100(ledger: &Ledger, node: &SigningKey, seq: u64, start: &str, hours: i64) {
    let start = Timestamp::parse(start).unwrap();
    acme_usage(ledger, node, seq, start, start.plus(hours * 3600), 1);
}

/// acme's record `seq` on node-1 under its lease: `count` H100s over `[start, end)`, logged at
/// its end (the ledger's clock is set there).
pub fn acme_usage(
    ledger: &Ledger,
    node: &SigningKey,
    seq: u64,
    start: Timestamp,
    end: Timestamp,
    count: i64,
) {
    acme_usage_logged_at(ledger, node, seq, (start, end), count, end);
}

/// Signs and logs acme's usage on node-1 as the agent would: `count` H100s present over
/// `[start, end)`, cut into records at each 00:00 UTC (intervals aligned in Unix time), each
/// logged at its end; `seq` is the last record's and moves on.
pub fn acme_present(
    ledger: &Ledger,
    node: &SigningKey,
    seq: &mut u64,
    (start, end): (&str, &str),
    count: i64,
) {
    let (mut from, end) = (t(start), t(end));
    while from < end {
        let to = from.plus(86_400 - from.unix().rem_euclid(86_400)).min(end);
        *seq += 1;
        acme_usage(ledger, node, *seq, from, to, count);
        from = to;
    }
}

/// As [`acme_usage`], logged at `at` (a late record: after its end).
pub fn acme_usage_logged_at(
    ledger: &Ledger,
    node: &SigningKey,
    seq: u64,
    (start, end): (Timestamp, Timestamp),
    count: i64,
    at: Timestamp,
) {
    ledger.set_clock(Some(at));
    let body = Body::GpuUsage(GpuUsage {
        tenant: "acme".into(),
        lease: Some(gpuledger::sample::lease("acme")),
        region: "west".into(),
        node: "node-1".into(),
        gpu_model: "H100".into(),
        gpu_count: dec(&count.to_string()),
        start,
        end,
        gpu_seconds: dec(&(count * start.seconds_until(end)).to_string()),
    });
    assert_accepted(
        &ledger
            .append(vec![signed("node-1", node, seq, &body)])
            .unwrap(),
    );
}

/// Asserts that `inv`, recomputed from its bundle with `from` replaced by `to` in the bundle
/// line holding `needle`, fails at that entry's signature (`entry`): a signed entry cannot be
/// altered, whatever it says.
pub fn assert_altered_entry_fails(
    ledger: &Ledger,
    inv: &Invoice,
    (needle, from, to): (&str, &str, &str),
    entry: u64,
) {
    let f = super::recompute_invoice(ledger, &InvoiceDoc::from(inv.clone()), |lines| {
        edit_bundle_line(lines, needle, from, to)
    })
    .unwrap_err();
    assert_eq!(
        (f.reason.code(), f.item.as_str()),
        ("entry_signature", format!("entry {entry}").as_str()),
        "{f:?}"
    );
}

/// The log's size.
pub fn size_of(ledger: &Ledger) -> u64 {
    ledger
        .reads()
        .run(|c| Ok(gpuledger::store::read::head(c)?.0))
        .unwrap()
}

/// A committed invoice fixture (`dir`, relative to the repository: `invoice.json`,
/// `bundle.ndjson`, `verifier_key.txt`): with `GPULEDGER_WRITE_ARTEFACTS=<dir>` set, writes the
/// invoice, its bundle and the log's verifier key there; else checks that `dir` holds exactly
/// what the ledger issues (the same bytes on either database: a set clock and fixed keys).
pub fn invoice_fixture(ledger: &Ledger, inv: &Invoice, dir: &str) {
    let (json, _) = gpuledger::store::invoices::invoice_json(inv).unwrap();
    let mut bundle = Vec::new();
    ledger
        .reads()
        .run(|c| {
            gpuledger::store::invoices::write_invoice_bundle_as(
                c,
                &InvoiceDoc::from(inv.clone()),
                gpuledger::core::bundle::Format::V3,
                &mut |l| {
                    bundle.extend_from_slice(&l);
                    Ok(())
                },
            )
        })
        .unwrap();
    let vkey = gpuledger::core::checkpoint::LogSigner::new(gpuledger::sample::ORIGIN, log_key())
        .unwrap()
        .verifier_key();
    if let Ok(out) = std::env::var("GPULEDGER_WRITE_ARTEFACTS") {
        let out = std::path::Path::new(&out);
        std::fs::create_dir_all(out).unwrap();
        std::fs::write(out.join("invoice.json"), &json).unwrap();
        std::fs::write(out.join("bundle.ndjson"), &bundle).unwrap();
        std::fs::write(out.join("verifier_key.txt"), format!("{vkey}\n")).unwrap();
        return;
    }
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    assert_eq!(
        std::fs::read_to_string(fixture.join("invoice.json")).unwrap(),
        json,
        "{dir}/invoice.json is what the ledger issues"
    );
    assert_eq!(
        std::fs::read(fixture.join("bundle.ndjson")).unwrap(),
        bundle,
        "{dir}/bundle.ndjson is the invoice's bundle"
    );
}

/// Edits the bundle line (one of [`super::recompute_invoice`]'s `lines`) that contains `needle`:
/// `from` becomes `to`, as a canonical leaf spells it or as the leaf's escaped envelope does.
/// A tampering test; panics when no line has `needle`.
pub fn edit_bundle_line(lines: &mut [Vec<u8>], needle: &str, from: &str, to: &str) {
    let l = lines
        .iter_mut()
        .find(|l| String::from_utf8_lossy(l).contains(needle))
        .unwrap_or_else(|| panic!("no bundle line holds {needle}"));
    let escaped = |s: &str| s.replace('"', "\\\"");
    let s = String::from_utf8(l.clone()).unwrap();
    *l = s
        .replace(&escaped(from), &escaped(to))
        .replace(from, to)
        .into_bytes();
}
