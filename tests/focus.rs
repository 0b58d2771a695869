//! The FinOps FOCUS 1.2 export (`GET /v1/exports/focus`, docs/FOCUS.md): issued invoices with
//! spot, on-demand and reserved usage, energy, a late record's correction and a credit note,
//! exported and read back as CSV; `BilledCost` per invoice equals the invoice's total exactly;
//! the columns FOCUS 1.2 requires; tenant isolation; and the FinOps `focus-validator` with zero
//! errors when it is installed (required under `GPULEDGER_REQUIRE_FOCUS_VALIDATOR=1`).

mod common;

use common::*;
use gpuledger::core::certificate::{CertificateRequest, Scope};
use gpuledger::core::envelope::Envelope;
use gpuledger::core::invoice::Period;
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::record::{Body, RateCard, RegionParameters, Role, Settlement, SpotPrice};
use gpuledger::core::time::Timestamp;
use gpuledger::store::access::{self, ApiRole};
use rust_decimal::Decimal;
use std::collections::{BTreeMap, BTreeSet};

/// The columns FOCUS 1.2 makes mandatory, and the conditional ones a GPU provider with usage
/// measurement, several pricing categories, sub accounts, regions and price lists must have;
/// written out here from the specification, not taken from the code under test.
const FOCUS_REQUIRED: [&str; 36] = [
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "InvoiceId",
    "ChargeFrequency",
];

/// The `x_` columns the export adds.
const EXTENSIONS: [&str; 7] = [
    "x_EnergyKWh",
    "x_PUE",
    "x_CarbonGramsCO2e",
    "x_InvoiceNumber",
    "x_CertificateId",
    "x_LogCheckpointSize",
    "x_LogCheckpointRoot",
];

/// The nodes the node-1 key may sign for.
const NODES: [&str; 5] = ["node-1", "node-b", "node-e", "node-e1", "node-2"];

fn rate_card(class: LeaseClass, price: &str) -> Body {
    Body::RateCard(RateCard {
        region: "west".into(),
        gpu_model: "H100".into(),
        lease_class: class,
        currency: "CNY".into(),
        price_per_gpu_hour: dec(price),
        effective_from: at(-86_400),
    })
}

fn day(n: i64) -> Period {
    Period {
        from: at(n * 86_400),
        to: at((n + 1) * 86_400),
    }
}

/// What the scenario issued: the invoices' numbers by tenant and period, the certificate, the
/// credit note's log index.
struct Issued {
    acme_day0: String,
    beta_day0: String,
    acme_day1: String,
    certificate: String,
    credit_index: u64,
}

/// A log with acme's day 0 (on-demand, reserved, spot across a price change, energy) and
/// beta's, both invoiced; a certificate of acme's day 0; a late on-demand record of acme's day
/// 0 and usage of day 1, invoiced as day 1 (the late record as an adjustment); and a credit
/// note against acme's day 0 invoice.
fn scenario(db: &TestDb) -> Issued {
    // Set up a day before the records, when the rate cards and region parameters take effect
    // (no price may take effect in the past; receive times never decrease).
    let ledger = open_at(db, at(-86_400));
    for n in NODES {
        ensure_node_in(&ledger, n, "west");
    }
    let node = signer_for(&ledger, "node-1", Role::Node, &NODES);
    let market = signer(&ledger, "market-1", Role::Market);
    parties(&ledger, &["acme", "beta"]);
    {
        // Their accounts, for tokens and the bill-to names.
        let mut c = gpuledger::store::connect(&db.url).unwrap();
        access::create_tenant(&mut c, "acme", "Acme AI").unwrap();
        access::create_tenant(&mut c, "beta", "Beta Labs").unwrap();
    }
    for body in [
        rate_card(LeaseClass::OnDemand, "18.5"),
        rate_card(LeaseClass::Reserved, "12"),
        lease_body("spot-1", "acme", LeaseClass::Spot, &[("node-2", "H100", 8)]),
        lease_body(
            "res-1",
            "acme",
            LeaseClass::Reserved,
            &[("node-b", "H100", 8)],
        ),
        // The on-demand usage is billed under on-demand leases of H100s (every usage record
        // names a lease that covers its node and model).
        lease_body(
            "od-acme",
            "acme",
            LeaseClass::OnDemand,
            &[("node-1", "H100", 8), ("node-e", "H100", 8)],
        ),
        lease_body(
            "od-beta",
            "beta",
            LeaseClass::OnDemand,
            &[("node-e1", "H100", 8)],
        ),
        Body::RegionParams(RegionParameters {
            region: "west".into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: dec("0.28"),
            pue: dec("1.08"),
            carbon_g_per_kwh: dec("530"),
            effective_from: at(-86_400),
        }),
    ] {
        ledger.append_ledger_entry(body).unwrap();
    }
    // Spot 9 from 00:00, 7.2 from 00:30, published as they took effect.
    let spots: Vec<Envelope> = [(0, "9"), (1800, "7.2")]
        .iter()
        .enumerate()
        .map(|(i, (t, p))| {
            let body = Body::SpotPrice(SpotPrice {
                region: "west".into(),
                gpu_model: "H100".into(),
                price_per_gpu_hour: dec(p),
                currency: "CNY".into(),
                effective_from: at(*t),
            });
            signed("market-1", &market, i as u64 + 1, &body)
        })
        .collect();
    ledger.set_clock(Some(at(0)));
    assert_accepted(&ledger.append(spots).unwrap());
    ledger.set_clock(None);
    let rec = |seq: u64, body: Body| signed("node-1", &node, seq, &body);
    assert_accepted(
        &ledger
            .append(vec![
                // 8 GPU-h on demand: 148.00.
                rec(
                    1,
                    h100_usage("acme", "node-1", "west", Some("od-acme"), "8", 0, 3600),
                ),
                // 1 GPU-h reserved: 12.00.
                rec(
                    2,
                    h100_usage("acme", "node-b", "west", Some("res-1"), "1", 0, 3600),
                ),
                // 2 GPUs spot for an hour: 1 GPU-h at 9 and 1 GPU-h at 7.2.
                rec(
                    3,
                    h100_usage("acme", "node-2", "west", Some("spot-1"), "2", 0, 3600),
                ),
                // 12.5 kWh × PUE 1.08 = 13.5 billed kWh at 0.28: 3.78.
                rec(4, acme_energy("node-1", "12.5", 0, 3600)),
                // beta: 1 GPU-h on demand: 18.50.
                rec(
                    5,
                    h100_usage("beta", "node-e1", "west", Some("od-beta"), "1", 0, 3600),
                ),
            ])
            .unwrap(),
    );
    let acme_day0 = ledger.issuance().invoices("acme", day(0)).unwrap();
    let beta_day0 = ledger.issuance().invoices("beta", day(0)).unwrap();
    let certificate = ledger
        .issuance()
        .certificate(CertificateRequest {
            tenant: "acme".into(),
            period: day(0),
            scope: Scope::default(),
        })
        .unwrap();
    // A late record of day 0 (2 GPU-h on demand: 37.00) and day 1's usage (18.50).
    assert_accepted(
        &ledger
            .append(vec![
                rec(
                    6,
                    h100_usage("acme", "node-e", "west", Some("od-acme"), "2", 7200, 10_800),
                ),
                rec(
                    7,
                    h100_usage(
                        "acme",
                        "node-1",
                        "west",
                        Some("od-acme"),
                        "1",
                        86_400,
                        90_000,
                    ),
                ),
            ])
            .unwrap(),
    );
    let acme_day1 = ledger.issuance().invoices("acme", day(1)).unwrap();
    let credit_index = ledger
        .issuance()
        .settle(Body::CreditNote(Settlement {
            tenant: "acme".into(),
            invoice: acme_day0[0].number.clone(),
            currency: "CNY".into(),
            amount: dec("48.00"),
            note: "outage on day 0".into(),
            external_reference: None,
        }))
        .unwrap();
    ledger
        .issuance()
        .settle(Body::Payment(Settlement {
            tenant: "acme".into(),
            invoice: acme_day0[0].number.clone(),
            currency: "CNY".into(),
            amount: dec("100.00"),
            note: "wire".into(),
            external_reference: None,
        }))
        .unwrap();
    Issued {
        acme_day0: acme_day0[0].number.clone(),
        beta_day0: beta_day0[0].number.clone(),
        acme_day1: acme_day1[0].number.clone(),
        certificate: certificate.id,
        credit_index,
    }
}

/// A parsed export: its header and its rows as column → cell.
struct Export {
    header: Vec<String>,
    rows: Vec<BTreeMap<String, String>>,
    text: String,
}

impl Export {
    fn parse(body: &[u8]) -> Export {
        let text = String::from_utf8(body.to_vec()).expect("UTF-8 CSV");
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = r.headers().unwrap().iter().map(str::to_owned).collect();
        let rows = r
            .records()
            .map(|rec| {
                let rec = rec.unwrap();
                assert_eq!(rec.len(), header.len(), "a short row in {text}");
                header
                    .iter()
                    .cloned()
                    .zip(rec.iter().map(str::to_owned))
                    .collect()
            })
            .collect();
        Export { header, rows, text }
    }

    fn of(&self, invoice_id: &str) -> Vec<&BTreeMap<String, String>> {
        self.rows
            .iter()
            .filter(|r| r["InvoiceId"] == invoice_id)
            .collect()
    }

    fn billed(&self, invoice_id: &str, category: Option<&str>) -> Decimal {
        self.of(invoice_id)
            .iter()
            .filter(|r| category.is_none_or(|c| r["ChargeCategory"] == c))
            .map(|r| dec(&r["BilledCost"]))
            .sum()
    }

    fn invoices(&self) -> BTreeSet<String> {
        self.rows
            .iter()
            .map(|r| r["x_InvoiceNumber"].clone())
            .collect()
    }
}

fn focus_path(from: Timestamp, to: Timestamp, tenant: Option<&str>) -> String {
    let mut p = format!("/v1/exports/focus?from={from}&to={to}");
    if let Some(t) = tenant {
        p.push_str(&format!("&tenant={t}"));
    }
    p
}

both_backends!(focus_export_reconciles_with_invoices, |db: &TestDb| {
    let issued = scenario(db);
    let (token, acme, auditor) = {
        let mut c = gpuledger::store::connect(&db.url).unwrap();
        let mut t = |role, tenant| {
            access::create_token(&mut c, role, tenant, "focus")
                .unwrap()
                .1
        };
        (
            t(ApiRole::Admin, None),
            t(ApiRole::Tenant, Some("acme")),
            t(ApiRole::Auditor, None),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let key = log_key_file(dir.path());
    let (child, base) = spawn_serve(&db.url, &key, 0, &["--workers", "1"]);
    let _serve = Proc(child);
    let h = Http::new(&base);

    let all = h.get(&focus_path(at(0), at(2 * 86_400), None), Some(&token));
    assert_eq!(all.status, 200, "{}", all.lossy());
    assert!(
        all.content_type.starts_with("text/csv"),
        "{}",
        all.content_type
    );
    let export = Export::parse(&all.body);

    // Every required column, and the extensions.
    for c in FOCUS_REQUIRED.iter().chain(EXTENSIONS.iter()) {
        assert!(export.header.iter().any(|h| h == c), "no column {c}");
    }
    assert_eq!(export.header, gpuledger::focus::COLUMNS);
    assert_eq!(
        export.invoices(),
        BTreeSet::from([
            issued.acme_day0.clone(),
            issued.beta_day0.clone(),
            issued.acme_day1.clone()
        ])
    );

    // Per invoice, BilledCost adds up to the invoice's total, net and tax to its net and tax
    // totals: exactly, as decimals.
    for number in [&issued.acme_day0, &issued.beta_day0, &issued.acme_day1] {
        let (st, inv) = h.call("GET", &format!("/v1/invoices/{number}"), Some(&token), None);
        assert_eq!(st, 200, "{inv}");
        let total = dec(inv["total"].as_str().unwrap());
        assert_eq!(
            export.billed(number, None),
            total,
            "{number}: {}",
            export.text
        );
        assert_eq!(
            export.billed(number, Some("Usage")),
            dec(inv["net_total"]
                .as_str()
                .unwrap_or(inv["total"].as_str().unwrap()))
        );
        if let Some(tax) = inv["tax_total"].as_str() {
            assert_eq!(export.billed(number, Some("Tax")), dec(tax));
        }
        let checkpoint = inv["checkpoint_size"].as_u64().unwrap().to_string();
        let account = inv["bill_to"]["name"]
            .as_str()
            .unwrap_or(inv["tenant"].as_str().unwrap());
        for r in export.of(number) {
            assert_eq!(r["BillingAccountName"], account);
            assert_eq!(r["SubAccountName"], account);
            assert_eq!(r["x_LogCheckpointSize"], checkpoint);
            assert_eq!(
                r["x_LogCheckpointRoot"],
                inv["checkpoint_root"].as_str().unwrap()
            );
            assert_eq!(r["BillingCurrency"], "CNY");
            assert_eq!(r["x_InvoiceNumber"], *number);
        }
    }
    // 148.00 + 12.00 + 9.00 + 7.20 + 3.78, computed by hand.
    assert_eq!(
        export.billed(&issued.acme_day0, Some("Usage")),
        dec("179.98")
    );

    let usage = |number: &str, sku_price: &str| -> Vec<BTreeMap<String, String>> {
        export
            .of(number)
            .into_iter()
            .filter(|r| r["ChargeCategory"] == "Usage" && r["SkuPriceId"] == sku_price)
            .cloned()
            .collect()
    };
    // On demand: Standard, 8 GPU-hours at 18.5, the measured GPU-seconds consumed.
    let od = &usage(&issued.acme_day0, "gpu/H100/west/on_demand")[0];
    assert_eq!(
        (
            od["PricingCategory"].as_str(),
            od["PricingUnit"].as_str(),
            od["PricingQuantity"].as_str(),
            od["ListUnitPrice"].as_str(),
            od["ContractedUnitPrice"].as_str(),
            od["ListCost"].as_str(),
            od["BilledCost"].as_str(),
        ),
        (
            "Standard",
            "GPU-Hours",
            "8",
            "18.5",
            "18.5",
            "148",
            "148.00"
        )
    );
    assert_eq!(
        (od["ConsumedQuantity"].as_str(), od["ConsumedUnit"].as_str()),
        ("28800", "GPU-Seconds")
    );
    assert_eq!(
        (od["SkuId"].as_str(), od["ChargeClass"].as_str()),
        ("gpu/H100", "")
    );
    assert_eq!(
        (
            od["SubAccountId"].as_str(),
            od["BillingAccountId"].as_str(),
            od["RegionId"].as_str()
        ),
        ("acme", "acme", "west")
    );
    assert_eq!(od["ChargePeriodStart"], at(0).to_string());
    assert_eq!(od["BillingPeriodEnd"], at(86_400).to_string());
    // Reserved: Committed. Spot: Dynamic, one row per spot price.
    let reserved = &usage(&issued.acme_day0, "gpu/H100/west/reserved")[0];
    assert_eq!(
        (
            reserved["PricingCategory"].as_str(),
            reserved["BilledCost"].as_str()
        ),
        ("Committed", "12.00")
    );
    let mut spot: Vec<(String, String, String)> = usage(&issued.acme_day0, "gpu/H100/west/spot")
        .iter()
        .map(|r| {
            assert_eq!(r["PricingCategory"], "Dynamic");
            (
                r["ListUnitPrice"].clone(),
                r["PricingQuantity"].clone(),
                r["BilledCost"].clone(),
            )
        })
        .collect();
    spot.sort();
    assert_eq!(
        spot,
        [
            ("7.2".into(), "1".into(), "7.20".into()),
            ("9".into(), "1".into(), "9.00".into())
        ]
    );
    // Energy: kWh priced with PUE, the measured kWh, PUE and carbon alongside.
    let energy = &usage(&issued.acme_day0, "energy/west")[0];
    assert_eq!(
        (
            energy["PricingUnit"].as_str(),
            energy["PricingQuantity"].as_str(),
            energy["BilledCost"].as_str(),
            energy["x_EnergyKWh"].as_str(),
            energy["x_PUE"].as_str(),
            energy["x_CarbonGramsCO2e"].as_str(),
        ),
        ("kWh", "13.5", "3.78", "12.5", "1.08", "7155")
    );
    // The certificate of day 0 counted every record of the day 0 invoice.
    for r in export.of(&issued.acme_day0) {
        assert_eq!(r["x_CertificateId"], issued.certificate, "{r:?}");
    }
    // The late record: a correction of day 0 on the day 1 invoice, which the certificate,
    // computed before it arrived, does not count.
    let corrections: Vec<_> = export
        .of(&issued.acme_day1)
        .into_iter()
        .filter(|r| r["ChargeClass"] == "Correction")
        .collect();
    assert!(!corrections.is_empty());
    for r in &corrections {
        assert_eq!(r["ChargePeriodStart"], at(0).to_string());
        assert_eq!(r["ChargePeriodEnd"], at(86_400).to_string());
        assert_eq!(r["BillingPeriodStart"], at(86_400).to_string());
        assert_eq!(r["x_CertificateId"], "");
    }
    assert_eq!(
        corrections
            .iter()
            .filter(|r| r["ChargeCategory"] == "Usage")
            .map(|r| dec(&r["BilledCost"]))
            .sum::<Decimal>(),
        dec("37.00")
    );
    for r in export.of(&issued.acme_day1) {
        if r["ChargeClass"].is_empty() {
            assert_eq!(r["ChargePeriodStart"], at(86_400).to_string());
        }
    }
    // The credit note: a Credit of its own document, naming the invoice it credits. The
    // payment is not a charge.
    let credit_id = format!("CN-{}", issued.credit_index);
    let credits = export.of(&credit_id);
    assert_eq!(credits.len(), 1, "{}", export.text);
    assert_eq!(
        (
            credits[0]["ChargeCategory"].as_str(),
            credits[0]["BilledCost"].as_str(),
            credits[0]["x_InvoiceNumber"].as_str(),
        ),
        ("Credit", "-48.00", issued.acme_day0.as_str())
    );
    assert_eq!(
        export.rows.len(),
        export.of(&issued.acme_day0).len()
            + export.of(&issued.beta_day0).len()
            + export.of(&issued.acme_day1).len()
            + 1,
        "no other rows (payments are not charges)"
    );

    // A tenant sees its own invoices only; another tenant's id is 404; auditors see all.
    let own = Export::parse(
        &h.get(&focus_path(at(0), at(2 * 86_400), None), Some(&acme))
            .body,
    );
    assert_eq!(
        own.invoices(),
        BTreeSet::from([issued.acme_day0.clone(), issued.acme_day1.clone()])
    );
    assert!(own.rows.iter().all(|r| r["SubAccountId"] == "acme"));
    let named = h.get(
        &focus_path(at(0), at(2 * 86_400), Some("acme")),
        Some(&acme),
    );
    assert_eq!(named.status, 200);
    for (path, tok, status) in [
        (
            focus_path(at(0), at(86_400), Some("beta")),
            Some(&acme),
            404,
        ),
        (
            focus_path(at(0), at(86_400), Some("nobody")),
            Some(&token),
            404,
        ),
        (focus_path(at(86_400), at(0), None), Some(&token), 400),
        (
            focus_path(at(0), at(86_400), Some("Not%20An%20Id")),
            Some(&token),
            400,
        ),
        (focus_path(at(0), at(86_400), None), None, 401),
    ] {
        let r = h.get(&path, tok.map(|s| s.as_str()));
        assert_eq!(r.status, status, "{path}: {}", r.lossy());
    }
    let audited = h.get(&focus_path(at(0), at(2 * 86_400), None), Some(&auditor));
    assert_eq!(audited.body, all.body, "auditors see what admins see");
    // The period selects invoices by overlap: day 1 alone holds the day 1 invoice only.
    let day1 = Export::parse(
        &h.get(&focus_path(at(86_400), at(2 * 86_400), None), Some(&token))
            .body,
    );
    assert_eq!(day1.invoices(), BTreeSet::from([issued.acme_day1.clone()]));
    let none = Export::parse(
        &h.get(
            &focus_path(at(5 * 86_400), at(6 * 86_400), None),
            Some(&token),
        )
        .body,
    );
    assert!(none.rows.is_empty());
    assert_eq!(none.header, export.header);

    // The invoice PDF is the same bytes on every download, also after a payment: the balance
    // is the invoice's account, not the PDF's. `lang` picks the labels.
    let pdf = format!("/v1/invoices/{}/pdf", issued.acme_day0);
    let first = h.get(&pdf, Some(&acme));
    assert_eq!(first.status, 200, "{}", first.lossy());
    let payment = serde_json::json!({"tenant": "acme", "invoice": issued.acme_day0,
        "currency": "CNY", "amount": "1.00", "note": "bank transfer"});
    let paid = h.post("/v1/payments", Some(&token), &payment);
    assert_eq!(paid.status, 201, "{}", paid.lossy());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = h.get(&pdf, Some(&acme));
    assert!(first.body == second.body, "two downloads differ");
    let account = h.get(
        &format!("/v1/invoices/{}/account", issued.acme_day0),
        Some(&acme),
    );
    assert!(
        account.text().contains("bank transfer"),
        "{}",
        account.text()
    );
    let zh = h.get(&format!("{pdf}?lang=zh-CN"), Some(&acme));
    assert_eq!(zh.status, 200);
    assert!(zh.body != first.body);
    assert!(zh.body == h.get(&format!("{pdf}?lang=zh-CN"), Some(&acme)).body);
    assert_eq!(h.get(&format!("{pdf}?lang=fr"), Some(&acme)).status, 400);

    validate(&all.body);
});

/// Rules that focus-validator 2.0.1 reports failed on every file that is right by the
/// specification, with why; any other failed rule fails the test.
const VALIDATOR_FAULTS: [(&str, &str); 2] = [
    // Its rule has no condition, so it fails on every non-null InvoiceId; it is one branch of
    // InvoiceId-C-003-C ("null without an invoice, or not null with one"), which passes.
    (
        "InvoiceId-C-004-C",
        "unconditional branch of an OR that passes",
    ),
    // Reported failed with a violation count of 1 on files whose every Correction row has a
    // ConsumedQuantity (and equally when they have none); its SQL
    // (`ConsumedQuantity IS NULL AND ChargeClass = 'Correction'`) selects no row of ours.
    ("ConsumedQuantity-C-006-C", "fails with no violating row"),
];

/// Runs the FinOps `focus-validator` (FOCUS 1.2) on the export and requires no failed rule but
/// the [`VALIDATOR_FAULTS`] and the composites above them. The validator is
/// `$GPULEDGER_FOCUS_VALIDATOR` or `focus-validator` on the PATH, run in
/// `$GPULEDGER_FOCUS_VALIDATOR_DIR` if set (2.0.1 reads `focus_validator/rules/currency_codes.csv`
/// relative to its working directory: give it its `site-packages`). One without
/// `--applicability-criteria` (before 2.0, e.g. 1.0.0 on PyPI, which knows FOCUS 1.0 only)
/// counts as missing. Missing, the check is skipped loudly, or fails under
/// `GPULEDGER_REQUIRE_FOCUS_VALIDATOR=1`.
fn validate(csv: &[u8]) {
    // To look at the file by hand.
    if let Ok(keep) = std::env::var("GPULEDGER_FOCUS_KEEP") {
        std::fs::write(keep, csv).unwrap();
    }
    let exe =
        std::env::var("GPULEDGER_FOCUS_VALIDATOR").unwrap_or_else(|_| "focus-validator".into());
    let help = std::process::Command::new(&exe).arg("--help").output();
    let supports = help
        .as_ref()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--applicability-criteria"));
    if !supports {
        let why = match &help {
            Err(e) => format!("{exe}: {e}"),
            Ok(_) => format!("{exe} predates FOCUS 1.2 (no --applicability-criteria)"),
        };
        if std::env::var("GPULEDGER_REQUIRE_FOCUS_VALIDATOR").as_deref() == Ok("1") {
            panic!("GPULEDGER_REQUIRE_FOCUS_VALIDATOR=1 but {why}");
        }
        eprintln!("SKIPPED: focus-validator check: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("focus.csv");
    std::fs::write(&file, csv).unwrap();
    let report_path = dir.path().join("report.xml");
    let cwd = std::env::var("GPULEDGER_FOCUS_VALIDATOR_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().to_owned());
    let out = std::process::Command::new(&exe)
        .arg("--data-file")
        .arg(&file)
        .args(["--validate-version", "1.2", "--block-download"])
        .args([
            "--applicability-criteria",
            gpuledger::focus::APPLICABILITY_CRITERIA,
        ])
        .args(["--output-type", "unittest", "--output-destination"])
        .arg(&report_path)
        .current_dir(cwd)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&report_path).unwrap_or_default();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.contains("<testcase"),
        "focus-validator did not run: {said}"
    );
    let failed = failures_in(&report);
    // A composite fails when a rule under it does: those of the known faults are theirs.
    let ours: Vec<&String> = failed
        .iter()
        .filter(|name| {
            !VALIDATOR_FAULTS
                .iter()
                .any(|(rule, _)| name.starts_with(rule))
                && !is_composite_of_faults(name)
        })
        .collect();
    assert!(
        ours.is_empty(),
        "focus-validator: {} failed rule(s): {ours:#?}\n{report}",
        ours.len()
    );
    eprintln!(
        "focus-validator: {} rules checked, none failed but the known faults {:?}",
        report.matches("<testcase").count(),
        VALIDATOR_FAULTS.map(|f| f.0)
    );
}

/// The composites above [`VALIDATOR_FAULTS`]: ConsumedQuantity-C-000, -003, -004, -005 and
/// their column checks fail with C-006.
fn is_composite_of_faults(name: &str) -> bool {
    [
        "ConsumedQuantity-C-000-",
        "ConsumedQuantity-C-003-",
        "ConsumedQuantity-C-004-",
        "ConsumedQuantity-C-005-",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// The failed rules of a JUnit report (`<testcase name=..>` holding a `<failure`/`<error`).
fn failures_in(report: &str) -> Vec<String> {
    report
        .split("<testcase")
        .skip(1)
        .filter(|case| {
            let body = case.split("</testcase>").next().unwrap_or(case);
            body.contains("<failure") || body.contains("<error")
        })
        .map(|case| {
            case.split("name=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or("?")
                .to_owned()
        })
        .collect()
}

/// Formula injection (OWASP "CSV Injection"): the tenant's name, the issuer's, a line's
/// description and region, and a credit note's text reach the FOCUS CSV with a single quote in
/// front when a spreadsheet would run them; the negative `BilledCost` of a credit, which we
/// write, stays a number. The same function as the invoice CSV's
/// (`invoice_render::csv_text`).
#[test]
fn text_a_spreadsheet_would_run_is_neutralised_and_credits_stay_numbers() {
    use gpuledger::core::invoice::{
        apply_tax, BillTo, Invoice, InvoiceLine, Issuer, LineKind, Unit,
    };
    use gpuledger::focus::{credit_row, invoice_rows, write_csv, Context, CreditNote, COLUMNS};
    let ts = |s: &str| Timestamp::parse(s).unwrap();
    let mut lines = vec![InvoiceLine {
        kind: LineKind::Gpu,
        description: "=cmd|' /C calc'!A0".into(),
        region: "@west".into(),
        gpu_model: Some("+H100".into()),
        class: Some(LeaseClass::OnDemand),
        plan: None,
        tier: None,
        quantity: dec("8"),
        unit: Unit::GpuHour,
        gpu_seconds: Some(dec("28800")),
        measured_kwh: None,
        pue: None,
        unit_price: dec("18.5"),
        net: dec("148.00"),
        tax_name: Some("VAT".into()),
        tax_rate: dec("0.06"),
        tax: Decimal::ZERO,
        gross: Decimal::ZERO,
        records: 1,
        adjustment_for: None,
        contract: None,
        category: None,
        timing: None,
        service_period: None,
    }];
    let t = apply_tax(&mut lines, "CNY");
    let inv = Invoice {
        format: gpuledger::core::invoice::INVOICE_FORMAT_V2.into(),
        number: "INV-000001".into(),
        tenant: "acme".into(),
        period: Period {
            from: ts("2026-11-01T00:00:00Z"),
            to: ts("2026-12-01T00:00:00Z"),
        },
        currency: "CNY".into(),
        issued_at: ts("2026-12-01T00:00:00Z"),
        log_origin: "ledger.example/log".into(),
        checkpoint_size: 40,
        checkpoint_root: "+47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuF=".into(),
        issuer: Issuer {
            name: "-Provider".into(),
            ..Default::default()
        },
        bill_to: BillTo {
            tenant: "acme".into(),
            name: "=HYPERLINK(\"https://evil.example\")".into(),
            address: vec![],
        },
        payment_terms_days: 30,
        due_at: ts("2026-12-31T00:00:00Z"),
        lines,
        net_total: t.net,
        tax_total: t.tax,
        total: t.gross,
        excluded: Vec::new(),
        commitments: Vec::new(),
        availability: Vec::new(),
        allowances: Vec::new(),
        prepaid: Vec::new(),
        amount_due: None,
    };
    let mut rows = invoice_rows(&inv, &Context::default()).unwrap();
    rows.push(
        credit_row(
            &inv,
            &CreditNote {
                index: 77,
                body: Settlement {
                    tenant: "acme".into(),
                    invoice: "INV-000001".into(),
                    currency: "CNY".into(),
                    amount: dec("1.50"),
                    note: "@SUM(1+1)".into(),
                    external_reference: None,
                },
            },
        )
        .unwrap(),
    );
    let mut out = Vec::new();
    write_csv(rows, &mut out).unwrap();
    let mut reader = csv::Reader::from_reader(out.as_slice());
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let col = |name: &str| COLUMNS.iter().position(|h| *h == name).unwrap();
    let mut cells: BTreeSet<String> = BTreeSet::new();
    for r in &records {
        assert_eq!(
            &r[col("BillingAccountName")],
            "'=HYPERLINK(\"https://evil.example\")"
        );
        assert_eq!(&r[col("InvoiceIssuerName")], "'-Provider");
        // Our hash keeps its spelling (a verifier compares it byte for byte).
        assert_eq!(
            &r[col("x_LogCheckpointRoot")],
            "+47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuF="
        );
        cells.extend(r.iter().map(str::to_owned));
    }
    assert_eq!(&records[0][col("ChargeDescription")], "'=cmd|' /C calc'!A0");
    assert_eq!(&records[0][col("RegionId")], "'@west");
    let credit = records.last().unwrap();
    assert_eq!(&credit[col("ChargeCategory")], "Credit");
    assert_eq!(&credit[col("BilledCost")], "-1.50");
    // No cell a spreadsheet would run is left, but for the numbers and the hash.
    for c in &cells {
        let danger = c.starts_with(['=', '+', '-', '@', '\t', '\r']);
        let number = c.parse::<Decimal>().is_ok();
        assert!(!danger || number || c.starts_with("+47DEQ"), "{c:?}");
    }
}
