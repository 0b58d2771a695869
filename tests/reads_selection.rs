//! Reads that cost what they return (issue #14): usage queries, invoice previews, invoices and
//! certificates read the records starting in their period through an index, and invoices and
//! certificates are computed outside the head lock and rechecked under it. Each test compares
//! with what the core rules give over the tenant's whole history (the offline verifiers'
//! recomputation from evidence bundles, which are written from the whole history), so a record
//! the selection misses fails it.

mod common;

use common::*;
use ed25519_dalek::SigningKey;
use gpuledger::core::bundle;
use gpuledger::core::certificate::{Certificate, CertificateCheck, Claims, Scope};
use gpuledger::core::envelope::Envelope;
use gpuledger::core::invoice::{Invoice, InvoiceCheck, Period};
use gpuledger::core::rating::{LeaseClass, Line, Rater};
use gpuledger::core::record::{
    Body, Energy, RateCard, RegionParameters, Role, TenantPlan, TenantRegistered, Tier, VolumeTiers,
};
use gpuledger::core::usage::{Aggregator, GroupBy, UsageRow, Window};
use gpuledger::sample;
use gpuledger::store::certificates::CertificateRequest;
use gpuledger::store::{invoices, pricing, usage, Ledger, StoreError};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

const ORIGIN: &str = "test.gpuledger/log";
const NODES: [&str; 4] = ["n0", "n1", "n2", "n3"];
const DAY: i64 = 86_400;

fn day(n: i64) -> Period {
    Period {
        from: at(n * DAY),
        to: at((n + 1) * DAY),
    }
}

fn verifier_key() -> String {
    gpuledger::core::checkpoint::LogSigner::new(ORIGIN, log_key())
        .unwrap()
        .verifier_key()
}

/// A fresh log of `db` with the prices the tests need ([`priced`]). They take effect five days
/// before the records' first day and are logged then (no price may take effect more than the
/// policy's skew before it is logged, and receive times never decrease): the ledger's clock
/// starts there and is the system's again for the records. Returns the ledger and the node key.
fn priced_log(db: &TestDb) -> (Ledger, SigningKey) {
    let ledger = open_at(db, at(-5 * DAY));
    let key = priced(&ledger);
    ledger.set_clock(None);
    (ledger, key)
}

/// H100s of each of n0–n3 (16 each) that acme's and beta's leases cover.
const LEASED_H100S: u32 = 8;

/// Logs the prices the tests need: rate cards in west and east, west region parameters, a
/// graduated plan in west that acme is on, and tenants acme and beta with their on-demand
/// leases (`lease-<tenant>`, [`LEASED_H100S`] H100s of each of n0–n3), all in force from five
/// days before the records' first day; returns the node key (signer `node-1`, for nodes
/// n0–n3).
fn priced(ledger: &Ledger) -> SigningKey {
    for n in NODES {
        ensure_node_in(ledger, n, "west");
    }
    let key = signer_for(ledger, "node-1", Role::Node, &NODES);
    for t in ["acme", "beta"] {
        ledger
            .append_ledger_entry(Body::TenantRegistered(TenantRegistered {
                tenant: t.into(),
            }))
            .unwrap();
        let items = NODES.map(|n| (n, "H100", LEASED_H100S));
        lease_with(ledger, &sample::lease(t), t, LeaseClass::OnDemand, &items);
    }
    let long_ago = at(-5 * DAY);
    let card = |region: &str, price: &str| {
        Body::RateCard(RateCard {
            region: region.into(),
            gpu_model: "H100".into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: dec(price),
            effective_from: long_ago,
        })
    };
    for body in [
        card("west", "18.5"),
        card("east", "24"),
        Body::RegionParams(RegionParameters {
            region: "west".into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: dec("0.28"),
            pue: dec("1.08"),
            carbon_g_per_kwh: dec("530"),
            effective_from: long_ago,
        }),
        Body::VolumeTiers(VolumeTiers {
            plan: "volume".into(),
            region: "west".into(),
            gpu_model: "H100".into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            tiers: vec![
                Tier {
                    up_to_gpu_hours: Some(dec("2")),
                    price_per_gpu_hour: dec("20"),
                },
                Tier {
                    up_to_gpu_hours: None,
                    price_per_gpu_hour: dec("10"),
                },
            ],
            effective_from: long_ago,
        }),
        Body::TenantPlan(TenantPlan {
            tenant: "acme".into(),
            plan: "volume".into(),
            effective_from: long_ago,
        }),
    ] {
        ledger.append_ledger_entry(body).unwrap();
    }
    key
}

/// The invoice recomputed offline from its evidence bundle (written from the whole history
/// with the core rule `InvoiceScope::in_bundle`).
fn recomputed(ledger: &Ledger, inv: &Invoice) -> Result<Invoice, bundle::Failure> {
    let mut lines = Vec::new();
    ledger
        .reads()
        .run(|c| {
            invoices::write_invoice_bundle(c, inv, &mut |mut l| {
                l.pop();
                lines.push(l);
                Ok(())
            })
        })
        .unwrap();
    let (_, check) = bundle::verify_bundle(
        lines.into_iter().map(Ok),
        &verifier_key(),
        |h, a| InvoiceCheck::start(inv.clone(), h, a),
        &mut |_| {},
    )?;
    Ok(check.finish()?.into_v2().expect("a version 2 invoice"))
}

/// The certificate's claims recomputed offline from its evidence bundle (written from the whole
/// history with the core rule `certificate::coverage`).
fn recounted(ledger: &Ledger, cert: &Certificate) -> Result<Claims, bundle::Failure> {
    let mut lines = Vec::new();
    ledger
        .reads()
        .run(|c| {
            gpuledger::store::certificates::write_certificate_bundle(c, cert, &mut |mut l| {
                l.pop();
                lines.push(l);
                Ok(())
            })
        })
        .unwrap();
    let (_, check) = bundle::verify_bundle(
        lines.into_iter().map(Ok),
        &verifier_key(),
        |h, a| CertificateCheck::start(cert.clone(), h, a),
        &mut |_| {},
    )?;
    check.finish()
}

fn claims_of(cert: &Certificate) -> Claims {
    Claims {
        entries: cert.entries.clone(),
        gpu: cert.gpu.clone(),
        energy: cert.energy.clone(),
        totals: cert.totals.clone(),
    }
}

/// What the preview must say: every usage and energy record of the tenant in the log, read
/// whole, rated by the core's rule (records attributed by their start).
fn preview_from_history(
    ledger: &Ledger,
    tenant: &str,
    period: Period,
    size: u64,
) -> BTreeMap<String, Vec<Line>> {
    ledger
        .reads()
        .run(|c| {
            let book = pricing::price_book(c, size)?;
            let mut rater = Rater::new(period.from);
            usage::for_each_usage(c, Some(tenant), size, &mut |b| match b {
                Body::GpuUsage(u) if period.contains(u.start) => rater.add_usage(&book, u),
                Body::Energy(e) if period.contains(e.start) => rater.add_energy(&book, e),
                _ => {}
            })?;
            Ok(rater.finish().0)
        })
        .unwrap()
}

fn preview(ledger: &Ledger, tenant: &str, period: Period) -> BTreeMap<String, Vec<Line>> {
    let size = ledger.reads().size().unwrap();
    ledger
        .reads()
        .run(|c| invoices::preview(c, tenant, period, size, Default::default()))
        .unwrap()
        .period_lines()
        .0
}

fn usage_rows(ledger: &Ledger, tenant: Option<&str>, from: i64, to: i64) -> Vec<UsageRow> {
    let agg = || {
        Aggregator::new(
            at(from),
            at(to),
            vec![GroupBy::Region, GroupBy::Node],
            Some(Window::Hour),
        )
    };
    let selected = ledger
        .reads()
        .run(|c| {
            let mut a = agg();
            usage::aggregate(c, tenant, at(from), at(to), &mut a)?;
            Ok(a.finish())
        })
        .unwrap();
    let whole = ledger
        .reads()
        .run(|c| {
            let mut a = agg();
            usage::for_each_usage(c, tenant, u64::MAX >> 2, &mut |b| a.add(b))?;
            Ok(a.finish())
        })
        .unwrap();
    assert_eq!(selected, whole, "usage of {tenant:?} in [{from}, {to})");
    selected
}

/// [`h100_usage`] of `tenant` under its lease (`lease-<tenant>`, see [`priced`]).
fn leased(tenant: &str, node: &str, region: &str, count: &str, start: i64, end: i64) -> Body {
    h100_usage(
        tenant,
        node,
        region,
        Some(&sample::lease(tenant)),
        count,
        start,
        end,
    )
}

/// A usage record of `tenant` (or an energy record of no tenant when `tenant` is `None`).
fn record(tenant: Option<&str>, node: &str, energy: bool, start: i64, end: i64) -> Body {
    match (tenant, energy) {
        (Some("acme"), true) => acme_energy(node, "0.5", start, end),
        (Some(t), _) => leased(t, node, "west", "2", start, end),
        (None, _) => Body::Energy(Energy {
            tenant: None,
            region: "west".into(),
            node: node.into(),
            start: at(start),
            end: at(end),
            kwh: dec("0.25"),
        }),
    }
}

/// Appends `bodies` as the next records of node-1; each must be accepted.
fn append(ledger: &Ledger, key: &SigningKey, seq: &Cell<u64>, bodies: &[Body]) {
    let envs: Vec<Envelope> = bodies
        .iter()
        .map(|b| {
            seq.set(seq.get() + 1);
            signed("node-1", key, seq.get(), b)
        })
        .collect();
    assert_accepted(&ledger.append(envs).unwrap());
}

// A late record of an invoiced day, appended after that invoice, is an adjustment of the next
// invoice; a record that starts before midnight and ends after belongs to the day it starts
// in, for invoices, previews, certificates and usage alike.
both_backends!(late_records_and_records_across_midnight, |db: &TestDb| {
    let (ledger, key) = priced_log(db);
    let seq = Cell::new(0);
    let west = |start, end| leased("acme", "n0", "west", "1", start, end);
    // Day 0: 2 GPU-hours (tier 1 at 20: 40.00) and 23:50–00:10, 1200 GPU-s across
    // midnight (continuing the count at tier 2, 10/h: 3.33). And a minute from day 1's first
    // second on another node: day 1's, not day 0's.
    append(
        &ledger,
        &key,
        &seq,
        &[
            west(0, 7200),
            west(DAY - 600, DAY + 600),
            leased("acme", "n1", "west", "1", DAY, DAY + 60),
        ],
    );
    let first = ledger.issuance().invoices("acme", day(0)).unwrap();
    assert_eq!(
        amounts(&first[0]),
        [("40.00".into(), None), ("3.33".into(), None)]
    );
    // Day 1's own hour and minute (1 GPU, tier 1: 3660 × 20 / 3600 = 20.33), and a late half
    // hour of day 0 (it continues day 0's count after 8400 GPU-s, at tier 2: 5.00).
    append(
        &ledger,
        &key,
        &seq,
        &[west(DAY + 3600, DAY + 7200), west(7200, 9000)],
    );
    assert_eq!(preview(&ledger, "acme", day(1))["CNY"].len(), 1);
    let second = ledger.issuance().invoices("acme", day(1)).unwrap();
    assert_eq!(
        amounts(&second[0]),
        [("20.33".into(), None), ("5.00".into(), Some(day(0)))]
    );
    for inv in [&first[0], &second[0]] {
        assert_eq!(recomputed(&ledger, inv), Ok(inv.clone()), "{}", inv.number);
    }
    // The late record is adjusted once: day 2's invoice has nothing of day 0.
    append(&ledger, &key, &seq, &[west(2 * DAY, 2 * DAY + 3600)]);
    let third = ledger.issuance().invoices("acme", day(2)).unwrap();
    assert_eq!(amounts(&third[0]), [("20.00".into(), None)]);
    // Certificates and usage: day 0 has three records (one across midnight), day 1 two.
    let cert = |d| {
        ledger
            .issuance()
            .certificate(CertificateRequest {
                tenant: "acme".into(),
                period: day(d),
                scope: Scope::default(),
            })
            .unwrap()
    };
    let c0 = cert(0);
    assert_eq!((c0.entries.count, c0.totals.gpu_seconds), (3, dec("10200")));
    assert_eq!(recounted(&ledger, &c0), Ok(claims_of(&c0)));
    let c1 = cert(1);
    assert_eq!(c1.entries.count, 2);
    assert_eq!(recounted(&ledger, &c1), Ok(claims_of(&c1)));
    let rows = usage_rows(&ledger, Some("acme"), 0, DAY);
    assert_eq!(rows.iter().map(|r| r.usage_records).sum::<u64>(), 3);
    let rows = usage_rows(&ledger, Some("acme"), DAY, 2 * DAY);
    assert_eq!(rows.iter().map(|r| r.usage_records).sum::<u64>(), 2);
    verified(&db.url);
});

// Random logs: records of two tenants and of none, in four days, some across midnight, logged
// in any order; invoices issued for days in any order (late records and tiered adjustments
// arise by themselves), certificates, previews and usage queries in between. Each answer must
// equal the whole-history recomputation.
both_backends!(selection_equals_the_whole_history, |db: &TestDb| {
    let (ledger, key) = priced_log(db);
    let seq = Cell::new(0);
    let mut rng = Rng::from_clock("selection_equals_the_whole_history");
    let mut used = HashSet::new();
    // The days acme and beta were invoiced for (acme in rounds 2, 5, 8 and 11, one day each).
    let mut invoiced: Vec<i64> = Vec::new();
    let mut beta_invoiced: Vec<i64> = Vec::new();
    let (mut invoices_issued, mut adjustments, mut certificates) = (0, 0, 0);
    for round in 0..12 {
        // Slots of 600 s starting at 300 s past the slot; a record lasts 60–600 s, so one in the
        // last slot of a day ends in the next day. Day 2's last slot is not used (it would end
        // after today's midnight, maybe in the future).
        let mut slot_in = |rng: &mut Rng, d: i64| loop {
            let slot = rng.below(if d == 2 { 143 } else { 144 }) as i64;
            let node = rng.below(4) as usize;
            if used.insert((node, d, slot)) {
                let start = d * DAY + slot * 600 + 300;
                return (NODES[node], start, start + 60 + rng.below(541) as i64);
            }
        };
        let mut bodies = Vec::new();
        for _ in 0..1 + rng.below(12) {
            let d = rng.below(4) as i64 - 1;
            let (node, start, end) = slot_in(&mut rng, d);
            let tenant = match rng.below(20) {
                0..=11 => Some("acme"),
                12..=16 => Some("beta"),
                _ => None,
            };
            bodies.push(record(tenant, node, rng.below(4) == 0, start, end));
        }
        // And a late usage record of a day acme was invoiced for, if any.
        if !invoiced.is_empty() {
            let d = invoiced[rng.below(invoiced.len() as u64) as usize];
            let (node, start, end) = slot_in(&mut rng, d);
            bodies.push(record(Some("acme"), node, false, start, end));
        }
        // Every third round, acme is invoiced for its next day (-1, 0, 1, 2), which gets a
        // usage record first; otherwise maybe beta for the drawn day, or a certificate.
        let d = rng.below(4) as i64 - 1;
        let tenant = if rng.below(3) == 0 { "beta" } else { "acme" };
        let invoice = match (round % 3, rng.below(3)) {
            (2, _) => {
                let d = invoiced.len() as i64 - 1;
                let (node, start, end) = slot_in(&mut rng, d);
                bodies.push(record(Some("acme"), node, false, start, end));
                invoiced.push(d);
                Some(("acme", d))
            }
            (_, 0) if !beta_invoiced.contains(&d) => {
                beta_invoiced.push(d);
                Some(("beta", d))
            }
            _ => None,
        };
        append(&ledger, &key, &seq, &bodies);
        if let Some((t, d)) = invoice {
            match ledger.issuance().invoices(t, day(d)) {
                Ok(issued) => {
                    for inv in &issued {
                        invoices_issued += 1;
                        adjustments += inv
                            .lines
                            .iter()
                            .filter(|l| l.adjustment_for.is_some())
                            .count();
                        assert_eq!(recomputed(&ledger, inv), Ok(inv.clone()), "{}", inv.number);
                    }
                }
                Err(StoreError::Refused(m)) if m.contains("nothing to invoice") => {}
                Err(e) => panic!("invoice of {t} for day {d}: {e}"),
            }
        } else if rng.below(2) == 0 {
            let req = CertificateRequest {
                tenant: tenant.into(),
                period: day(d),
                scope: Scope::default(),
            };
            match ledger.issuance().certificate(req) {
                Ok(cert) => {
                    certificates += 1;
                    assert_eq!(recounted(&ledger, &cert), Ok(claims_of(&cert)));
                }
                Err(StoreError::Refused(m)) if m.contains("nothing to certify") => {}
                Err(e) => panic!("certificate of {tenant} for day {d}: {e}"),
            }
        }
        let size = ledger.reads().size().unwrap();
        assert_eq!(
            preview(&ledger, tenant, day(d)),
            preview_from_history(&ledger, tenant, day(d), size),
            "preview of {tenant} for day {d}"
        );
        // A day, two days, and windows starting at noon (across a midnight); per tenant and
        // for all.
        let from = d * DAY + rng.below(3) as i64 * 3600 * 12;
        for t in [Some("acme"), Some("beta"), None] {
            usage_rows(&ledger, t, from, from + (1 + rng.below(2) as i64) * DAY);
        }
    }
    eprintln!(
        "{invoices_issued} invoices with {adjustments} adjustment lines and {certificates} \
         certificates checked"
    );
    // Acme's days are invoiced in rounds 2, 5, 8 and 11, and every round after the first adds
    // a late record of a day already invoiced, so the invoices of rounds 5, 8 and 11 carry
    // adjustments.
    assert!(adjustments >= 3, "{adjustments} adjustment lines");
    verified(&db.url);
});

/// An invoice's lines as (net amount, the period it adjusts).
fn amounts(inv: &Invoice) -> Vec<(String, Option<Period>)> {
    inv.lines
        .iter()
        .map(|l| (l.net.to_string(), l.adjustment_for))
        .collect()
}

/// A ledger shared with a hook, and a counter of the attempts the hook saw.
fn with_hook(ledger: &Arc<Ledger>, mut each: impl FnMut(&Ledger, u32) + 'static) -> Rc<Cell<u32>> {
    let attempts = Rc::new(Cell::new(0));
    let (l, a) = (ledger.clone(), attempts.clone());
    invoices::set_issue_hook(Some(Box::new(move |attempt| {
        a.set(attempt);
        each(&l, attempt)
    })));
    attempts
}

// An invoice whose period gains a record between its computation and its commit is computed
// again, and says what a computation at its checkpoint says; a record that cannot change it
// (another tenant's, another day's) does not make it recompute.
both_backends!(an_overtaken_invoice_is_recomputed, |db: &TestDb| {
    let (ledger, key) = priced_log(db);
    let ledger = Arc::new(ledger);
    let seq = Rc::new(Cell::new(0));
    let west = |t: &str, start, end| leased(t, "n1", "west", "1", start, end);
    append(&ledger, &key, &seq, &[west("acme", 0, 3600)]);
    // Another tenant's record and one of acme's next day: issued at once, at the size after them.
    let (k, s) = (key.clone(), seq.clone());
    let attempts = with_hook(&ledger, move |l, attempt| {
        if attempt == 1 {
            append(
                l,
                &k,
                &s,
                &[west("beta", 0, 60), west("acme", DAY, DAY + 60)],
            );
        }
    });
    let size = ledger.reads().size().unwrap();
    let first = ledger.issuance().invoices("acme", day(0)).unwrap();
    assert_eq!(attempts.get(), 1, "nothing relevant changed");
    assert_eq!(
        first[0].checkpoint_size,
        size + 2,
        "issued at the size after the records"
    );
    assert_eq!(first[0].total.to_string(), "20.00");
    assert_eq!(recomputed(&ledger, &first[0]), Ok(first[0].clone()));
    // A record of the period, logged while day 1 was computed: computed again, with it.
    let (k, s) = (key.clone(), seq.clone());
    let attempts = with_hook(&ledger, move |l, attempt| {
        if attempt == 1 {
            append(l, &k, &s, &[west("acme", DAY + 3600, DAY + 7200)]);
        }
    });
    let second = ledger.issuance().invoices("acme", day(1)).unwrap();
    assert_eq!(attempts.get(), 2, "recomputed once");
    assert_eq!(second[0].lines[0].records, 2);
    assert_eq!(recomputed(&ledger, &second[0]), Ok(second[0].clone()));
    // A late record of day 0, and another invoice of acme's (for day -1) that carries it as an
    // adjustment, both logged while day 2 was computed: day 2 is computed again, after that
    // invoice, and numbered after it.
    append(
        &ledger,
        &key,
        &seq,
        &[
            west("acme", 2 * DAY, 2 * DAY + 60),
            west("acme", -DAY, -DAY + 3600),
        ],
    );
    let (k, s) = (key.clone(), seq.clone());
    let other = Rc::new(RefCell::new(None));
    let o = other.clone();
    let attempts = with_hook(&ledger, move |l, attempt| {
        if attempt == 1 {
            append(l, &k, &s, &[west("acme", 7200, 9000)]);
            *o.borrow_mut() = Some(l.issuance().invoices("acme", day(-1)).unwrap());
        }
    });
    let third = ledger.issuance().invoices("acme", day(2)).unwrap();
    assert_eq!(attempts.get(), 2);
    let other = other.borrow_mut().take().unwrap();
    assert_eq!(other[0].number, "INV-000003");
    assert_eq!(
        amounts(&other[0]),
        [("20.00".into(), None), ("10.00".into(), Some(day(0)))]
    );
    assert_eq!(third[0].number, "INV-000004");
    assert_eq!(amounts(&third[0]), [("0.33".into(), None)]);
    for inv in [&other[0], &third[0]] {
        assert_eq!(recomputed(&ledger, inv), Ok(inv.clone()), "{}", inv.number);
    }
    // A record of the period logged at every attempt: busy, and nothing issued.
    let (k, s) = (key.clone(), seq.clone());
    let attempts = with_hook(&ledger, move |l, attempt| {
        let start = 3 * DAY - 7200 + 60 * attempt as i64;
        append(l, &k, &s, &[west("beta", start, start + 60)]);
    });
    append(&ledger, &key, &seq, &[west("beta", 2 * DAY, 2 * DAY + 60)]);
    let busy = ledger.issuance().invoices("beta", day(2));
    assert!(matches!(busy, Err(StoreError::Busy(_))), "{busy:?}");
    assert_eq!(attempts.get(), invoices::MAX_ISSUE_ATTEMPTS);
    invoices::set_issue_hook(None);
    let listed = ledger
        .reads()
        .run(|c| invoices::list(c, Some("beta")))
        .unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    // Once the log is quiet it is issued, with every record.
    let beta = ledger.issuance().invoices("beta", day(2)).unwrap();
    assert_eq!(
        beta[0].lines[0].records,
        1 + u64::from(invoices::MAX_ISSUE_ATTEMPTS)
    );
    assert_eq!(recomputed(&ledger, &beta[0]), Ok(beta[0].clone()));
    verified(&db.url);
});

// A certificate whose period gains a record, or whose energy gains region parameters, between
// its computation and its commit is computed again and equals the recomputation from its
// bundle; numbering stays gapless.
//
// No price may take effect more than the policy's skew (300 s) before it is logged, so region
// parameters logged once day 0 may be certified can change only energy that starts in its last
// 300 s, and only if day 0 may be certified the moment it ends: the ledger closes periods at
// once (`invoice_close_seconds = 0`), its clock fixed at the end of day 0, and the energy
// record is the day's last four minutes.
both_backends!(an_overtaken_certificate_is_recomputed, |db: &TestDb| {
    let (priced, key) = priced_log(db);
    drop(priced);
    let closes_at_once = gpuledger::core::clock::ClockPolicy {
        close_seconds: Some(0),
        ..Default::default()
    };
    let ledger = Ledger::open_with_high_water(&db.url, log_key(), None, closes_at_once).unwrap();
    ledger.set_clock(Some(at(DAY)));
    let ledger = Arc::new(ledger);
    let seq = Rc::new(Cell::new(0));
    append(
        &ledger,
        &key,
        &seq,
        &[
            leased("acme", "n2", "west", "4", 0, 3600),
            acme_energy("n2", "2.5", DAY - 240, DAY),
        ],
    );
    let request = |d| CertificateRequest {
        tenant: "acme".into(),
        period: day(d),
        scope: Scope::default(),
    };
    // A record of the period.
    let (k, s) = (key.clone(), seq.clone());
    let attempts = with_hook(&ledger, move |l, attempt| {
        if attempt == 1 {
            append(l, &k, &s, &[leased("acme", "n2", "west", "1", 3600, 3660)]);
        }
    });
    let first = ledger.issuance().certificate(request(0)).unwrap();
    assert_eq!(attempts.get(), 2);
    assert_eq!(first.entries.count, 3);
    assert_eq!(recounted(&ledger, &first), Ok(claims_of(&first)));
    // New region parameters for west taking effect at the energy record's start, logged 240 s
    // later (within the skew): the PUE of the energy line changes, so it is computed again.
    let (k, s) = (key.clone(), seq.clone());
    let attempts = with_hook(&ledger, move |l, attempt| {
        if attempt == 1 {
            l.append_ledger_entry(Body::RegionParams(RegionParameters {
                region: "west".into(),
                currency: "CNY".into(),
                electricity_price_per_kwh: dec("0.30"),
                pue: dec("1.2"),
                carbon_g_per_kwh: dec("500"),
                effective_from: at(DAY - 240),
            }))
            .unwrap();
            // Another tenant's record changes nothing.
            append(l, &k, &s, &[leased("beta", "n2", "west", "1", 0, 60)]);
        }
    });
    let second = ledger.issuance().certificate(request(0)).unwrap();
    assert_eq!(attempts.get(), 2);
    assert_eq!(second.energy[0].pue, Some(dec("1.2")));
    assert_eq!(recounted(&ledger, &second), Ok(claims_of(&second)));
    // Another day's record only: issued at once.
    let (k, s) = (key.clone(), seq.clone());
    let attempts = with_hook(&ledger, move |l, attempt| {
        if attempt == 1 {
            append(
                l,
                &k,
                &s,
                &[leased("acme", "n2", "west", "1", DAY, DAY + 60)],
            );
        }
    });
    let third = ledger.issuance().certificate(request(0)).unwrap();
    assert_eq!(attempts.get(), 1);
    assert_eq!(third.entries, second.entries);
    assert_eq!(recounted(&ledger, &third), Ok(claims_of(&third)));
    invoices::set_issue_hook(None);
    assert_eq!(
        [&first, &second, &third].map(|c| c.id.as_str()),
        ["CERT-000001", "CERT-000002", "CERT-000003"]
    );
    verified(&db.url);
});

// Certificates and invoices issued from several threads while records are appended: every one
// is issued (or refused for a reason of its own), numbered without gaps, and each equals the
// recomputation from its bundle.
both_backends!(concurrent_issues_are_gapless_and_exact, |db: &TestDb| {
    let (ledger, key) = priced_log(db);
    let ledger = Arc::new(ledger);
    let seq = Cell::new(0);
    let mut bodies = Vec::new();
    for d in 0..3 {
        for (i, t) in ["acme", "beta"].into_iter().enumerate() {
            bodies.push(leased(t, NODES[i], "west", "1", d * DAY, d * DAY + 3600));
        }
    }
    append(&ledger, &key, &seq, &bodies);
    let writer = {
        let (l, k) = (ledger.clone(), key.clone());
        let first = seq.get();
        std::thread::spawn(move || {
            for i in 0..40u64 {
                // Day -1, which nobody issues: these never change what is computed.
                let start = -DAY + 60 * i as i64;
                let b = leased("beta", "n3", "west", "1", start, start + 60);
                assert_accepted(
                    &l.append(vec![signed("node-1", &k, first + 1 + i, &b)])
                        .unwrap(),
                );
            }
        })
    };
    let workers: Vec<_> = (0..3)
        .flat_map(|d| ["acme", "beta"].map(|t| (d, t)))
        .map(|(d, t)| {
            let l = ledger.clone();
            std::thread::spawn(move || {
                let cert = l.issuance().certificate(CertificateRequest {
                    tenant: t.into(),
                    period: day(d),
                    scope: Scope::default(),
                });
                let inv = l.issuance().invoices(t, day(d));
                (cert.unwrap(), inv.unwrap())
            })
        })
        .collect();
    let issued: Vec<(Certificate, Vec<Invoice>)> =
        workers.into_iter().map(|w| w.join().unwrap()).collect();
    writer.join().unwrap();
    let mut ids: Vec<&str> = issued.iter().map(|(c, _)| c.id.as_str()).collect();
    let mut numbers: Vec<&str> = issued
        .iter()
        .flat_map(|(_, i)| i.iter().map(|i| i.number.as_str()))
        .collect();
    ids.sort();
    numbers.sort();
    assert_eq!(
        ids,
        (1..=6).map(|i| format!("CERT-{i:06}")).collect::<Vec<_>>()
    );
    assert_eq!(
        numbers,
        (1..=6).map(|i| format!("INV-{i:06}")).collect::<Vec<_>>()
    );
    for (cert, invs) in &issued {
        assert_eq!(recounted(&ledger, cert), Ok(claims_of(cert)));
        for inv in invs {
            assert_eq!(recomputed(&ledger, inv), Ok(inv.clone()));
        }
    }
    verified(&db.url);
});
