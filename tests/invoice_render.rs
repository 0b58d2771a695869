//! Invoice downloads: JSON, CSV and PDF say the same thing, and each can be read back; Chinese
//! names and addresses render in the PDF (an embedded, subset CJK font whose glyphs extract
//! back to the text); version 1 documents still render.

mod common;

use common::dec;
use gpuledger::core::invoice::{
    apply_tax, from_json, BillTo, Invoice, InvoiceDoc, InvoiceLine, Issuer, LineKind, Period, Unit,
    INVOICE_FORMAT_V2,
};
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::time::Timestamp;
use gpuledger::invoice_render::{
    to_csv, to_json, to_pdf, Lang, PdfNotes, RenderError, CSV_HEADER, MAX_PDF_LINES,
};
use rust_decimal::Decimal;
use serde_json::Value;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

fn gpu(region: &str, class: LeaseClass, seconds: &str, price: &str, net: &str) -> InvoiceLine {
    let label = match class {
        LeaseClass::OnDemand => "on-demand",
        LeaseClass::Reserved => "reserved",
        LeaseClass::Spot => "spot",
    };
    InvoiceLine {
        kind: LineKind::Gpu,
        description: format!("GPU compute, H100, {region}, {label}"),
        region: region.into(),
        gpu_model: Some("H100".into()),
        class: Some(class),
        plan: None,
        tier: None,
        quantity: gpuledger::core::invoice::gpu_hours(dec(seconds)),
        unit: Unit::GpuHour,
        gpu_seconds: Some(dec(seconds)),
        measured_kwh: None,
        pue: None,
        unit_price: dec(price),
        net: dec(net),
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
    }
}

/// Sets tax, gross and the totals by the one rule.
fn settle_totals(inv: &mut Invoice) {
    let t = apply_tax(&mut inv.lines, &inv.currency);
    (inv.net_total, inv.tax_total, inv.total) = (t.net, t.tax, t.gross);
}

/// The worked example of docs/RATING.md (seven lines, 167.89 CNY net), plus one late
/// on-demand hour of October (18.50), with VAT of 6 %.
fn golden() -> Invoice {
    use LeaseClass::*;
    let mut late = gpu("west", OnDemand, "3600", "18.5", "18.50");
    late.adjustment_for = Some(Period {
        from: ts("2026-10-01T00:00:00Z"),
        to: ts("2026-11-01T00:00:00Z"),
    });
    let lines = vec![
        gpu("west", OnDemand, "28800", "18.5", "148.00"),
        gpu("east", OnDemand, "300", "24", "2.00"),
        gpu("west", Spot, "1200", "9", "3.00"),
        gpu("west", Spot, "3000", "7.2", "6.00"),
        gpu("west", Spot, "1200", "11.35", "3.78"),
        gpu("west", Spot, "600", "8", "1.33"),
        InvoiceLine {
            kind: LineKind::Energy,
            description: "Electricity, west, PUE 1.08".into(),
            region: "west".into(),
            gpu_model: None,
            class: None,
            plan: None,
            tier: None,
            quantity: dec("13.5"),
            unit: Unit::Kwh,
            gpu_seconds: None,
            measured_kwh: Some(dec("12.5")),
            pue: Some(dec("1.08")),
            unit_price: dec("0.28"),
            net: dec("3.78"),
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
        },
        late,
    ];
    let mut inv = Invoice {
        format: INVOICE_FORMAT_V2.into(),
        number: "INV-000042".into(),
        tenant: "acme".into(),
        period: Period {
            from: ts("2026-11-01T00:00:00Z"),
            to: ts("2026-12-01T00:00:00Z"),
        },
        currency: "CNY".into(),
        issued_at: ts("2026-12-01T00:05:00Z"),
        log_origin: "ledger.example/gpuledger".into(),
        checkpoint_size: 4242,
        checkpoint_root: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=".into(),
        issuer: Issuer {
            name: "Example Compute Ltd.".into(),
            address: vec!["1 Example Road".into(), "Beijing 100080".into()],
            tax_id: Some("91110108000000000X".into()),
            email: Some("billing@example.org".into()),
        },
        bill_to: BillTo {
            tenant: "acme".into(),
            name: "Acme AI".into(),
            address: vec!["9 Harbour Street".into()],
        },
        payment_terms_days: 30,
        due_at: ts("2026-12-31T00:05:00Z"),
        lines,
        net_total: Decimal::ZERO,
        tax_total: Decimal::ZERO,
        total: Decimal::ZERO,
        excluded: Vec::new(),
        commitments: Vec::new(),
        availability: Vec::new(),
        allowances: Vec::new(),
        prepaid: Vec::new(),
        amount_due: None,
    };
    settle_totals(&mut inv);
    inv
}

fn doc(inv: &Invoice) -> InvoiceDoc {
    InvoiceDoc::V2(inv.clone())
}

fn notes() -> PdfNotes {
    PdfNotes {
        lang: None,
        buyer_tax_id: Some("91310115000000000Y".into()),
        payment_instructions: vec![
            "Bank transfer to Example Bank, Beijing branch".into(),
            "Account number: 1100 2233 4455 6677 889".into(),
        ],
        public_url: Some("https://ledger.example.org".into()),
        verifier_key: "ledger.example/gpuledger+2c02504d+AAAA".into(),
    }
}

fn pdf_text(pdf: &[u8]) -> (usize, String) {
    let doc = lopdf::Document::load_mem(pdf).expect("the PDF parses");
    let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
    let text = doc.extract_text(&pages).expect("text extracts");
    (pages.len(), text)
}

/// Asserts that the PDF of `inv` in `lang` (`None`: the invoice's own) has every needle in its
/// extracted text.
fn pdf_says(inv: &Invoice, lang: Option<Lang>, needles: &[&str]) {
    let notes = PdfNotes { lang, ..notes() };
    let text = pdf_text(&to_pdf(&doc(inv), &notes).unwrap()).1;
    for needle in needles {
        assert!(
            text.contains(needle),
            "{needle:?} not in the PDF text:\n{text}"
        );
    }
}

fn field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

#[test]
fn golden_figures() {
    let inv = golden();
    assert_eq!(
        inv.lines[..7].iter().map(|l| l.net).sum::<Decimal>(),
        dec("167.89")
    );
    assert_eq!(inv.net_total.to_string(), "186.39");
    // 148.00 × 0.06 = 8.88; 3.78 × 0.06 = 0.2268 → 0.23; 1.33 × 0.06 = 0.0798 → 0.08; ...
    assert_eq!(inv.lines[0].tax.to_string(), "8.88");
    assert_eq!(inv.lines[4].tax.to_string(), "0.23");
    assert_eq!(inv.lines[5].tax.to_string(), "0.08");
    assert_eq!(inv.tax_total.to_string(), "11.19");
    assert_eq!(inv.total.to_string(), "197.58");
    assert!(inv.is_consistent());
    // Quantities are in the unit they are priced in.
    assert_eq!(inv.lines[0].quantity.to_string(), "8");
    assert_eq!(inv.lines[1].quantity.to_string(), "0.083333");
    assert_eq!(inv.lines[6].quantity, dec("12.5") * dec("1.08"));
}

#[test]
fn json_parses_back_and_its_totals_are_the_sums_of_its_lines() {
    let inv = golden();
    let bytes = to_json(&doc(&inv));
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["format"], "gpuledger-invoice/v2");
    assert_eq!(json["number"], "INV-000042");
    assert_eq!(json["period"]["from"], "2026-11-01T00:00:00Z");
    assert_eq!(json["due_at"], "2026-12-31T00:05:00Z");
    assert_eq!(json["issuer"]["name"], "Example Compute Ltd.");
    assert_eq!(json["bill_to"]["name"], "Acme AI");
    let lines = json["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 8);
    for (member, total) in [
        ("net", "net_total"),
        ("tax", "tax_total"),
        ("gross", "total"),
    ] {
        let sum: Decimal = lines.iter().map(|l| dec(field(l, member))).sum();
        assert_eq!(sum, dec(field(&json, total)), "{member}");
    }
    assert_eq!(json["total"], "197.58");
    assert_eq!(lines[0]["unit"], "GPU-h");
    assert_eq!(lines[0]["quantity"], "8");
    assert_eq!(lines[0]["gpu_seconds"], "28800");
    assert_eq!(lines[0]["unit_price"], "18.5");
    assert_eq!(lines[0]["net"], "148.00");
    assert_eq!(lines[0]["tax_rate"], "0.06");
    assert_eq!(lines[6]["unit"], "kWh");
    assert_eq!(lines[6]["measured_kwh"], "12.5");
    assert_eq!(lines[6]["pue"], "1.08");
    assert_eq!(lines[7]["adjustment_for"]["to"], "2026-11-01T00:00:00Z");
    // No member of the old line schema is left.
    for old in ["amount", "type", "unit_price_per_gpu_hour"] {
        assert!(lines.iter().all(|l| l.get(old).is_none()), "{old}");
    }
    // It reads back as the same document.
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(from_json(&text).unwrap(), doc(&inv));
    // An unknown member, or an unknown format, is refused.
    let mut extra = json.clone();
    extra["discount"] = "1.00".into();
    assert!(from_json(&extra.to_string()).is_err());
    let mut other = json.clone();
    other["format"] = "gpuledger-invoice/v9".into();
    assert!(from_json(&other.to_string()).unwrap_err().contains("v9"));
}

#[test]
fn csv_parses_back_and_agrees_with_json_line_for_line() {
    let inv = golden();
    let json: Value = serde_json::from_slice(&to_json(&doc(&inv))).unwrap();
    let json_lines = json["lines"].as_array().unwrap();
    let csv_bytes = to_csv(&doc(&inv));
    let mut reader = csv::Reader::from_reader(csv_bytes.as_slice());
    assert_eq!(
        reader.headers().unwrap(),
        &csv::StringRecord::from(CSV_HEADER.to_vec())
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(
        rows.len(),
        inv.lines.len() + 1,
        "one row per line, then the total"
    );

    let col = |name: &str| CSV_HEADER.iter().position(|h| *h == name).unwrap();
    for (row, line) in rows.iter().zip(json_lines) {
        assert_eq!(&row[col("invoice_number")], "INV-000042");
        assert_eq!(&row[col("format")], "gpuledger-invoice/v2");
        assert_eq!(&row[col("tenant")], "acme");
        assert_eq!(&row[col("bill_to_name")], "Acme AI");
        assert_eq!(&row[col("issuer_name")], "Example Compute Ltd.");
        assert_eq!(&row[col("period_from")], field(&json["period"], "from"));
        assert_eq!(&row[col("period_to")], field(&json["period"], "to"));
        assert_eq!(&row[col("due_at")], field(&json, "due_at"));
        assert_eq!(&row[col("currency")], "CNY");
        // The columns from kind to gross are the line's members of the same names.
        for key in &CSV_HEADER[col("kind")..=col("gross")] {
            assert_eq!(&row[col(key)], field(line, key), "{key}");
        }
        assert_eq!(row[col("records")], line["records"].to_string());
        let adj = &line["adjustment_for"];
        assert_eq!(&row[col("adjustment_for_from")], field(adj, "from"));
        assert_eq!(&row[col("adjustment_for_to")], field(adj, "to"));
    }
    let total = rows.last().unwrap();
    assert_eq!(&total[col("kind")], "total");
    assert_eq!(&total[col("net")], field(&json, "net_total"));
    assert_eq!(&total[col("tax")], field(&json, "tax_total"));
    assert_eq!(&total[col("gross")], field(&json, "total"));
    assert_eq!(&total[col("quantity")], "");
    let sum: Decimal = rows[..rows.len() - 1]
        .iter()
        .map(|r| dec(&r[col("gross")]))
        .sum();
    assert_eq!(sum.to_string(), "197.58");
    assert_eq!(&rows[7][col("adjustment_for_from")], "2026-10-01T00:00:00Z");
    assert_eq!(&rows[0][col("adjustment_for_from")], "");
}

#[test]
fn pdf_text_has_issuer_bill_to_terms_taxes_how_to_pay_and_how_to_verify() {
    let inv = golden();
    let pdf = to_pdf(&doc(&inv), &notes()).unwrap();
    assert!(pdf.starts_with(b"%PDF-"));
    let (pages, text) = pdf_text(&pdf);
    assert!(pages <= 2, "{pages} pages");
    for needle in [
        "Invoice INV-000042",
        "Example Compute Ltd.",
        "1 Example Road",
        "Tax ID: 91110108000000000X",
        "Bill to",
        "Acme AI",
        "9 Harbour Street",
        "Tax ID: 91310115000000000Y",
        "Tenant ID: acme",
        "Issue date",
        "1 December 2026",
        "Due date",
        "31 December 2026",
        "30 days",
        "1 November 2026 to 30 November 2026",
        "GPU compute, H100, west,\nOn-demand",
        "GPU compute, H100, west, Spot",
        "8 GPU-h",
        "18.5/GPU-h",
        "28800 GPU-seconds",
        "13.5 kWh",
        "12.5 kWh measured",
        "148.00",
        "VAT 6%",
        "8.88",
        "Net total (CNY)",
        "186.39",
        "Tax total (CNY)",
        "11.19",
        "197.58",
        "Adjustments: late records of the period 1 October 2026 to 31 October 2026",
        "How to pay",
        "197.58 CNY, due by 31 December 2026.",
        "Bank transfer to Example Bank, Beijing branch",
        "Account number: 1100 2233 4455 6677 889",
        "Please quote INV-000042 as the payment reference.",
        "https://ledger.example.org/v1/invoices/INV-000042/account",
        "How to verify",
        "https://ledger.example.org/v1/invoices/INV-000042/bundle",
        "gpuledger verify --invoice INV-000042.json --bundle INV-000042.bundle.jsonl",
        "--log-key 'ledger.example/gpuledger+2c02504d+AAAA'",
        &format!("Page {pages} of {pages}"),
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} not in the PDF text:\n{text}"
        );
    }
    // Raw wire names, wire timestamps and the balance (which changes) are not shown.
    assert!(!text.contains("on_demand"), "{text}");
    assert!(!text.contains("verify-log"), "{text}");
    assert!(!text.contains("2026-12-01T00:05:00Z"), "{text}");
    assert!(!text.contains("as of"), "{text}");
    assert!(!text.contains("No billing address"), "{text}");
}

/// Records a dispute excluded from billing are listed on the PDF, in either language, with
/// their log entry and reason; an invoice without any has no such section.
#[test]
fn excluded_records_are_listed_on_the_pdf() {
    let mut inv = golden();
    let plain = pdf_text(&to_pdf(&doc(&inv), &notes()).unwrap()).1;
    assert!(!plain.contains("Excluded from billing"), "{plain}");
    inv.excluded = vec![gpuledger::core::invoice::ExcludedRecord {
        entry: 4711,
        reason: "node-7 counted [10 s, 20 s) twice".into(),
    }];
    pdf_says(
        &inv,
        None,
        &[
            "Excluded from billing",
            "Log entry 4711: node-7 counted [10 s, 20 s) twice",
        ],
    );
    pdf_says(&inv, Some(Lang::ZhCn), &["不计费的记录", "日志条目 4711"]);
}

/// An invoice its tenant's prepaid lots paid part of (docs/RATING.md, "Prepaid balances"):
/// the PDF lists each draw under the totals, then the amount due, which "How to pay" asks
/// for; the CSV adds a `prepaid` row per draw and an `amount_due` row after the total.
#[test]
fn prepaid_draws_and_the_amount_due_show_on_the_pdf_and_csv() {
    use gpuledger::core::prepaid::PrepaidDraw;
    use gpuledger::core::record::PrepaymentSource;
    let mut inv = golden();
    inv.prepaid = vec![
        PrepaidDraw {
            prepayment: "PROMO-2027".into(),
            source: PrepaymentSource::Grant,
            amount: dec("50.00"),
        },
        PrepaidDraw {
            prepayment: "=TOPUP-1".into(),
            source: PrepaymentSource::Purchase,
            amount: dec("100.00"),
        },
    ];
    inv.amount_due = Some(dec("47.58"));
    pdf_says(
        &inv,
        None,
        &[
            "Paid from prepaid balance (PROMO-2027, CNY)",
            "-50.00",
            "Paid from prepaid balance (=TOPUP-1, CNY)",
            "-100.00",
            "Amount due (CNY)",
            "47.58 CNY, due by",
        ],
    );
    pdf_says(
        &inv,
        Some(Lang::ZhCn),
        &["预付余额抵扣", "应付金额", "应付 47.58 CNY"],
    );
    let csv_bytes = to_csv(&doc(&inv));
    let mut reader = csv::Reader::from_reader(csv_bytes.as_slice());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let col = |name: &str| CSV_HEADER.iter().position(|h| *h == name).unwrap();
    let tail: Vec<(String, String, String, String)> = rows[rows.len() - 3..]
        .iter()
        .map(|r| {
            (
                r[col("kind")].to_owned(),
                r[col("description")].to_owned(),
                r[col("class")].to_owned(),
                r[col("gross")].to_owned(),
            )
        })
        .collect();
    let row = |k: &str, d: &str, c: &str, g: &str| (k.into(), d.into(), c.into(), g.into());
    assert_eq!(
        tail,
        [
            row("prepaid", "PROMO-2027", "grant", "-50.00"),
            // A reference a spreadsheet would run is written as text.
            row("prepaid", "'=TOPUP-1", "purchase", "-100.00"),
            row("amount_due", "", "", "47.58"),
        ]
    );
    assert_eq!(&rows[rows.len() - 4][col("kind")], "total");
}

/// A tenant with a Chinese name and address: the CJK font is embedded (a subset, not 4 MB),
/// and the text extracts back to the Chinese strings through its ToUnicode CMap.
#[test]
fn chinese_names_and_addresses_render_and_extract_back() {
    let mut inv = golden();
    inv.bill_to.name = "蓝鳍实验室".into();
    inv.bill_to.address = vec!["上海市浦东新区张江路 88 号".into()];
    inv.issuer.name = "示例算力科技有限公司".into();
    let pdf = to_pdf(&doc(&inv), &notes()).unwrap();
    assert!(
        pdf.len() < 300_000,
        "{} bytes: the font is not subset",
        pdf.len()
    );
    let parsed = lopdf::Document::load_mem(&pdf).unwrap();
    let embedded = parsed.objects.values().any(|o| {
        o.as_dict()
            .ok()
            .and_then(|d| d.get(b"FontFile2").ok())
            .is_some()
    });
    assert!(embedded, "a TrueType font program is embedded");
    let (_, text) = pdf_text(&pdf);
    for needle in [
        "蓝鳍实验室",
        "上海市浦东新区张江路",
        "88",
        "示例算力科技有限公司",
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} not in the PDF text:\n{text}"
        );
    }
    // Without Chinese text the CJK font does not go in.
    let latin = to_pdf(&doc(&golden()), &notes()).unwrap();
    assert!(!String::from_utf8_lossy(&latin).contains("GLDSFB"));
    assert!(String::from_utf8_lossy(&pdf).contains("GLDSFB"));
}

#[test]
fn a_long_invoice_paginates_and_keeps_its_totals() {
    let mut inv = golden();
    inv.lines = (0..200)
        .map(|i| {
            let mut l = gpu(
                &format!("region-{:03}", i / 10),
                LeaseClass::Spot,
                "3600",
                &format!("{}.{:02}", 1 + i / 100, i % 100),
                &format!("{}.{:02}", 1 + i / 100, i % 100),
            );
            if i >= 190 {
                l.adjustment_for = Some(Period {
                    from: ts("2026-10-01T00:00:00Z"),
                    to: ts("2026-11-01T00:00:00Z"),
                });
            }
            l
        })
        .collect();
    settle_totals(&mut inv);
    let total = inv.total.to_string();
    let (pages, text) = pdf_text(&to_pdf(&doc(&inv), &PdfNotes::default()).unwrap());
    assert!(pages > 1, "200 lines fit on {pages} page(s)");
    assert!(text.contains(&format!("Page {pages} of {pages}")));
    assert!(text.contains(&total), "total {total} missing");
    for needle in ["region-000", "region-019", "2.99", "How to verify", "4242"] {
        assert!(text.contains(needle), "{needle:?} missing");
    }
}

#[test]
fn odd_text_is_kept_safe_and_long_ids_wrap() {
    let mut inv = golden();
    inv.bill_to.name = "t\u{e9}nant\u{7}".into();
    inv.lines[0].description = format!("GPU compute, {}, west, on-demand", "M".repeat(128));
    inv.lines[0].quantity = dec("79228162514264337593543950.335");
    let (_, text) = pdf_text(&to_pdf(&doc(&inv), &PdfNotes::default()).unwrap());
    // Accented Latin is in the Latin font; a control character becomes `?`.
    assert!(text.contains("ténant?"), "{text}");
    assert!(text.contains("MMMMMMMMMM"));
    assert!(text.contains("79228162514264337593543950.335 GPU-h"));
}

#[test]
fn pdf_refuses_an_inconsistent_or_oversized_invoice() {
    let mut inv = golden();
    inv.total = dec("1.00");
    assert!(matches!(
        to_pdf(&doc(&inv), &PdfNotes::default()),
        Err(RenderError::TotalMismatch { .. })
    ));
    let mut inv = golden();
    inv.lines[0].tax = dec("8.89");
    assert!(to_pdf(&doc(&inv), &PdfNotes::default()).is_err());

    // At the limit it renders; one more is refused.
    let mut inv = golden();
    let line = inv.lines[0].clone();
    inv.lines = vec![line.clone(); MAX_PDF_LINES];
    settle_totals(&mut inv);
    assert!(to_pdf(&doc(&inv), &PdfNotes::default())
        .unwrap()
        .starts_with(b"%PDF-"));
    inv.lines.push(line);
    settle_totals(&mut inv);
    let err = to_pdf(&doc(&inv), &PdfNotes::default()).unwrap_err();
    assert_eq!(
        err,
        RenderError::TooManyLines {
            number: inv.number.clone(),
            lines: MAX_PDF_LINES + 1
        }
    );
    assert!(err.to_string().contains("CSV or JSON"));
}

/// A version 1 document (issued before version 2: no `format`) is served as it was issued,
/// and its CSV and PDF show it in today's units, without tax.
#[test]
fn a_version_1_invoice_still_renders() {
    let v1 = r#"{"checkpoint_root":"47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=","checkpoint_size":4242,"currency":"CNY","issued_at":"2026-12-01T00:05:00Z","lines":[{"amount":"148.00","class":"on_demand","gpu_model":"H100","kind":"gpu","quantity":"28800","records":1,"region":"west","unit":"GPU-s","unit_price":"18.5"},{"amount":"3.78","kind":"energy","pue":"1.08","quantity":"12.5","records":1,"region":"west","unit":"kWh","unit_price":"0.28"}],"log_origin":"ledger.example/gpuledger","number":"INV-000001","period":{"from":"2026-11-01T00:00:00Z","to":"2026-12-01T00:00:00Z"},"tenant":"acme","total":"151.78"}"#;
    let d = from_json(v1).unwrap();
    assert!(matches!(d, InvoiceDoc::V1(_)));
    // JSON: the same members and values as issued (so the same SHA-256 of its RFC 8785 form).
    let served: Value = serde_json::from_slice(&to_json(&d)).unwrap();
    assert_eq!(served, serde_json::from_str::<Value>(v1).unwrap());
    let csv = String::from_utf8(to_csv(&d)).unwrap();
    assert!(csv.contains(",8,GPU-h,28800,"), "{csv}");
    let (_, text) = pdf_text(&to_pdf(&d, &PdfNotes::default()).unwrap());
    for needle in ["Invoice INV-000001", "8 GPU-h", "151.78", "On-demand"] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

/// Formula injection (OWASP "CSV Injection"): a name, description, region or tax name that a
/// spreadsheet would run (`=`, `+`, `-`, `@`, tab, CR) is written with a single quote in front;
/// the amounts we write stay numbers, negative ones too.
#[test]
fn csv_text_cells_a_spreadsheet_would_run_are_neutralised() {
    let mut inv = golden();
    inv.bill_to.name = "=HYPERLINK(\"https://evil.example\",\"click\")".into();
    inv.issuer.name = "+SUM(1,2)".into();
    inv.lines[0].description = "-2+3".into();
    inv.lines[0].region = "@west".into();
    inv.lines[0].gpu_model = Some("\tH100".into());
    inv.lines[0].tax_name = Some("\rVAT".into());
    inv.lines[1].description = "＝1+1".into();
    let csv_bytes = to_csv(&doc(&inv));
    let mut reader = csv::Reader::from_reader(csv_bytes.as_slice());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let col = |name: &str| CSV_HEADER.iter().position(|h| *h == name).unwrap();
    for row in &rows {
        assert_eq!(
            &row[col("bill_to_name")],
            "'=HYPERLINK(\"https://evil.example\",\"click\")"
        );
        assert_eq!(&row[col("issuer_name")], "'+SUM(1,2)");
    }
    assert_eq!(&rows[0][col("description")], "'-2+3");
    assert_eq!(&rows[0][col("region")], "'@west");
    assert_eq!(&rows[0][col("gpu_model")], "'\tH100");
    assert_eq!(&rows[0][col("tax_name")], "'\rVAT");
    assert_eq!(&rows[1][col("description")], "'＝1+1");
    // Ordinary text and the numbers are untouched.
    assert_eq!(&rows[2][col("description")], &inv.lines[2].description);
    assert_eq!(&rows[0][col("net")], "148.00");
    // A negative amount we write stays a number.
    assert_eq!(gpuledger::invoice_render::csv_text("plain"), "plain");
    assert_eq!(gpuledger::invoice_render::csv_text("-x"), "'-x");
    assert_eq!(gpuledger::invoice_render::csv_text(""), "");
}

/// Every download of an issued invoice is the same bytes: no time of download, no balance, no
/// random ids. The creation date is the issue time and the trailer /ID is the invoice's
/// SHA-256 (its first 16 bytes, hex), so a PDF names the document it renders.
#[test]
fn two_downloads_are_the_same_bytes_and_the_id_is_the_invoice_hash() {
    use sha2::{Digest, Sha256};
    let inv = golden();
    let first = to_pdf(&doc(&inv), &notes()).unwrap();
    let second = to_pdf(&doc(&inv), &notes()).unwrap();
    assert!(first == second, "two renderings differ");
    let zh = PdfNotes {
        lang: Some(Lang::ZhCn),
        ..notes()
    };
    let zh1 = to_pdf(&doc(&inv), &zh).unwrap();
    assert!(
        zh1 == to_pdf(&doc(&inv), &zh).unwrap(),
        "two zh renderings differ"
    );
    assert!(zh1 != first);

    let parsed = lopdf::Document::load_mem(&first).unwrap();
    let ids = parsed.trailer.get(b"ID").unwrap().as_array().unwrap();
    let canonical = serde_jcs::to_vec(&doc(&inv).to_value()).unwrap();
    let hash = Sha256::digest(&canonical);
    assert_eq!(
        ids[0].as_str().unwrap(),
        hex::encode(&hash[..16]).as_bytes(),
        "the document id is the invoice's hash"
    );
    let zh_ids = lopdf::Document::load_mem(&zh1)
        .unwrap()
        .trailer
        .get(b"ID")
        .unwrap()
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(zh_ids[0], ids[0], "one document, two renderings");
    assert_ne!(zh_ids[1], ids[1]);
    let info = parsed
        .get_dictionary(parsed.trailer.get(b"Info").unwrap().as_reference().unwrap())
        .unwrap();
    let created = info.get(b"CreationDate").unwrap().as_str().unwrap();
    assert!(
        String::from_utf8_lossy(created).starts_with("D:20261201000500"),
        "{}",
        String::from_utf8_lossy(created)
    );
}

/// No font is left to the reader: every font is a Type0 font whose descriptor embeds the font
/// program (FontFile2 or FontFile3); no standard-14 font (Helvetica) is named.
#[test]
fn every_font_is_embedded() {
    let mut inv = golden();
    inv.bill_to.name = "蓝鳍实验室".into();
    for lang in [Lang::En, Lang::ZhCn] {
        let pdf = to_pdf(
            &doc(&inv),
            &PdfNotes {
                lang: Some(lang),
                ..notes()
            },
        )
        .unwrap();
        let parsed = lopdf::Document::load_mem(&pdf).unwrap();
        let mut fonts = 0;
        let mut descriptors = 0;
        for o in parsed.objects.values() {
            let Ok(d) = o.as_dict() else { continue };
            let is = |k: &[u8], v: &[u8]| d.get(k).ok().and_then(|x| x.as_name().ok()) == Some(v);
            if is(b"Type", b"Font")
                && !is(b"Subtype", b"CIDFontType2")
                && !is(b"Subtype", b"CIDFontType0")
            {
                fonts += 1;
                assert!(is(b"Subtype", b"Type0"), "{lang:?}: a simple font: {d:?}");
            }
            if is(b"Type", b"FontDescriptor") {
                descriptors += 1;
                assert!(
                    d.get(b"FontFile2").is_ok() || d.get(b"FontFile3").is_ok(),
                    "{lang:?}: a font descriptor without its font program: {d:?}"
                );
            }
        }
        // Arimo Regular and Bold, Droid Sans Fallback.
        assert_eq!((fonts, descriptors), (3, 3), "{lang:?}");
        assert!(!String::from_utf8_lossy(&pdf).contains("Helvetica"));
    }
}

/// A tenant whose name is in Chinese gets a Chinese invoice: labels, dates and line
/// descriptions, which extract back; `lang` asks for the other language.
#[test]
fn a_chinese_tenant_gets_chinese_labels_and_dates() {
    let mut inv = golden();
    inv.bill_to.name = "蓝鳍实验室".into();
    let pdf = to_pdf(&doc(&inv), &notes()).unwrap();
    let (pages, text) = pdf_text(&pdf);
    for needle in [
        "账单 INV-000042",
        "不是增值税发票",
        "销售方",
        "购买方",
        "蓝鳍实验室",
        "纳税人识别号：91110108000000000X",
        "纳税人识别号：91310115000000000Y",
        "租户 ID：acme",
        "账单编号",
        "开具日期",
        "2026年12月1日",
        "付款截止日期",
        "2026年12月31日",
        "30 天",
        "计费周期",
        "2026年11月1日至2026年11月30日",
        "项目",
        "数量",
        "单价",
        "不含税金额",
        "税率",
        "税额",
        "价税合计",
        "GPU 算力，H100，west，按需",
        "28800 GPU 秒",
        "电力，west，PUE 1.08",
        "调整：计费周期 2026年10月1日至2026年10月31日 的迟到记录",
        "不含税合计 (CNY)",
        "186.39",
        "付款方式",
        "应付 197.58 CNY，请于 2026年12月31日 前支付。",
        "付款时请在附言中注明账单编号 INV-000042。",
        "如何验证",
        &format!("第 {pages} 页，共 {pages} 页"),
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} not in the PDF text:\n{text}"
        );
    }
    assert!(!text.contains("Invoice number"), "{text}");
    // Asked for in English, the same invoice has English labels.
    let en = to_pdf(
        &doc(&inv),
        &PdfNotes {
            lang: Some(Lang::En),
            ..notes()
        },
    )
    .unwrap();
    let (_, text) = pdf_text(&en);
    assert!(
        text.contains("Invoice number") && text.contains("蓝鳍实验室"),
        "{text}"
    );
    assert!(!text.contains("开具日期"), "{text}");
}

/// A bill-to without an address is said on the PDF (the issue answers a `Warning` too).
#[test]
fn a_bill_to_without_an_address_is_warned_about() {
    let mut inv = golden();
    inv.bill_to.address = vec![];
    let (_, text) = pdf_text(&to_pdf(&doc(&inv), &notes()).unwrap());
    assert!(text.contains("No billing address is on file"), "{text}");
    let mut zh = golden();
    zh.bill_to.name = "蓝鳍实验室".into();
    zh.bill_to.address = vec![];
    let (_, text) = pdf_text(&to_pdf(&doc(&zh), &notes()).unwrap());
    assert!(text.contains("购买方未登记账单地址"), "{text}");
}

/// Sub-day periods show their times; whole days show dates only.
#[test]
fn a_period_within_a_day_shows_its_times() {
    let mut inv = golden();
    inv.period = Period {
        from: ts("2026-11-05T08:00:00Z"),
        to: ts("2026-11-05T14:30:00Z"),
    };
    let (_, text) = pdf_text(&to_pdf(&doc(&inv), &notes()).unwrap());
    assert!(
        text.contains("5 November 2026, 08:00 to 14:30 UTC"),
        "{text}"
    );
}

/// Writes an English and a Chinese invoice PDF into `$GPULEDGER_WRITE_PDFS`, to look at
/// (`pdftoppm -png -r 80 en.pdf en`); does nothing without it.
#[test]
fn write_sample_pdfs_when_asked() {
    let Some(dir) = std::env::var_os("GPULEDGER_WRITE_PDFS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::write(
        dir.join("en.pdf"),
        to_pdf(&doc(&golden()), &notes()).unwrap(),
    )
    .unwrap();
    let mut zh = golden();
    zh.bill_to.name = "蓝鳍实验室".into();
    zh.bill_to.address = vec!["上海市浦东新区张江路 88 号".into(), "200120 中国".into()];
    zh.issuer.name = "示例算力科技有限公司".into();
    zh.issuer.address = vec!["北京市海淀区中关村大街 1 号".into(), "100080 中国".into()];
    std::fs::write(dir.join("zh.pdf"), to_pdf(&doc(&zh), &notes()).unwrap()).unwrap();
}

/// A contract's lines (docs/RATING.md, "Contracts") on the PDF and the CSV: each fee by its
/// name with the billing period it is for and no record count, the true-up, and the totals
/// still the sums of the lines.
#[test]
fn contract_lines_are_rendered_with_their_billing_period() {
    use gpuledger::core::invoice::{apply_tax, LineKind, Unit};
    use gpuledger::core::record::{FeeCategory, FeeTiming};
    let mut inv = golden();
    let mut fee = inv.lines[0].clone();
    fee.kind = LineKind::Fee;
    fee.description = "Bare-metal node, 2 × H100, monthly".into();
    fee.gpu_model = None;
    fee.class = None;
    fee.gpu_seconds = None;
    fee.quantity = dec("0.532258");
    fee.unit = Unit::Period;
    fee.unit_price = dec("3100");
    fee.net = dec("1650.00");
    fee.records = 0;
    fee.contract = Some("C-acme-2027".into());
    fee.category = Some(FeeCategory::Compute);
    fee.timing = Some(FeeTiming::Advance);
    fee.service_period = Some(Period {
        from: Timestamp::parse("2026-11-15T12:00:00Z").unwrap(),
        to: Timestamp::parse("2026-12-01T00:00:00Z").unwrap(),
    });
    let mut true_up = fee.clone();
    true_up.kind = LineKind::TrueUp;
    true_up.description = "Minimum commitment true-up, contract C-acme-2027".into();
    true_up.quantity = dec("1");
    true_up.unit_price = dec("347.26");
    true_up.net = dec("347.26");
    true_up.category = None;
    true_up.timing = None;
    true_up.service_period = None;
    inv.lines = vec![inv.lines[0].clone(), fee, true_up];
    let t = apply_tax(&mut inv.lines, &inv.currency);
    (inv.net_total, inv.tax_total, inv.total) = (t.net, t.tax, t.gross);
    let text = pdf_text(&to_pdf(&doc(&inv), &notes()).unwrap()).1;
    // (Long descriptions wrap in the item column.)
    for needle in [
        "Bare-metal node, 2 × H100,",
        "15 November 2026, 12:00 to 1",
        "Minimum commitment true-up,",
        "0.532258 period",
        "3100/period",
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} not in the PDF text:\n{text}"
        );
    }
    let csv = String::from_utf8(to_csv(&doc(&inv))).unwrap();
    let kinds: Vec<&str> = csv
        .lines()
        .skip(1)
        .filter_map(|l| {
            l.split(',')
                .find(|c| ["gpu", "fee", "true_up", "total"].contains(c))
        })
        .collect();
    assert_eq!(kinds, ["gpu", "fee", "true_up", "total"], "{csv}");
}

/// The ledger-issued SLA invoice (tests/fixtures/sla, written by tests/sla.rs): its PDF prints
/// the availability each SLA judged and the credit line, in English and in Chinese.
#[test]
fn sla_availability_and_credits_are_printed_in_both_languages() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sla/invoice.json"
    );
    let inv = gpuledger::core::invoice::from_json(&std::fs::read_to_string(path).unwrap())
        .unwrap()
        .into_v2()
        .unwrap();
    pdf_says(
        &inv,
        Some(Lang::En),
        &[
            "Availability (SLA)",
            "lease lease-acme",
            "availability 99.7983 %",
            "credit 10 %",
            "-300.00",
        ],
    );
    pdf_says(
        &inv,
        Some(Lang::ZhCn),
        &[
            "可用率（SLA）",
            "SLA 赔付 10 %",
            "可用率 99.7983 %",
            "赔付 10 %",
        ],
    );
}
