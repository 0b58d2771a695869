//! Invoice downloads: JSON, CSV and PDF say the same thing, and each can be read back.

mod common;

use common::dec;
use gpuledger::core::invoice::{Invoice, InvoiceLine, Period};
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::time::Timestamp;
use gpuledger::invoice_render::{to_csv, to_json, to_pdf, RenderError, CSV_HEADER, MAX_PDF_LINES};
use rust_decimal::Decimal;
use serde_json::Value;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

fn gpu(region: &str, class: LeaseClass, seconds: &str, price: &str, amount: &str) -> InvoiceLine {
    InvoiceLine {
        kind: "gpu",
        region: region.into(),
        gpu_model: Some("H100".into()),
        class: Some(class),
        quantity: dec(seconds),
        unit: "GPU-s",
        unit_price: dec(price),
        pue: None,
        amount: dec(amount),
        records: 1,
        adjustment_for: None,
    }
}

/// The worked example of docs/RATING.md (seven lines, 167.89 CNY), plus one late on-demand
/// hour of October (18.50).
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
            kind: "energy",
            region: "west".into(),
            gpu_model: None,
            class: None,
            quantity: dec("12.5"),
            unit: "kWh",
            unit_price: dec("0.28"),
            pue: Some(dec("1.08")),
            amount: dec("3.78"),
            records: 1,
            adjustment_for: None,
        },
        late,
    ];
    let mut inv = Invoice {
        number: "INV-acme-2026-11".into(),
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
        lines,
        total: Decimal::ZERO,
    };
    inv.total = inv.sum_of_lines();
    inv
}

fn pdf_text(pdf: &[u8]) -> (usize, String) {
    let doc = lopdf::Document::load_mem(pdf).expect("the PDF parses");
    let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
    let text = doc.extract_text(&pages).expect("text extracts");
    (pages.len(), text)
}

fn field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

#[test]
fn golden_figures() {
    let inv = golden();
    assert_eq!(
        inv.lines[..7].iter().map(|l| l.amount).sum::<Decimal>(),
        dec("167.89")
    );
    assert_eq!(inv.total.to_string(), "186.39");
}

#[test]
fn json_parses_back_and_its_total_is_the_sum_of_its_lines() {
    let inv = golden();
    let json: Value = serde_json::from_slice(&to_json(&inv)).unwrap();
    assert_eq!(json["number"], "INV-acme-2026-11");
    assert_eq!(json["period"]["from"], "2026-11-01T00:00:00Z");
    assert_eq!(json["total"], "186.39");
    let lines = json["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 8);
    let sum: Decimal = lines.iter().map(|l| dec(field(l, "amount"))).sum();
    assert_eq!(sum, dec(field(&json, "total")));
    assert_eq!(lines[0]["amount"], "148.00");
    assert_eq!(lines[0]["unit_price"], "18.5");
    assert_eq!(lines[6]["pue"], "1.08");
    assert_eq!(lines[7]["adjustment_for"]["to"], "2026-11-01T00:00:00Z");
    // Stable field order: the order core::invoice declares.
    let text = String::from_utf8(to_json(&inv)).unwrap();
    let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
    assert!(at("number") < at("tenant") && at("tenant") < at("period"));
    assert!(at("checkpoint_root") < at("lines") && at("lines") < at("total"));
    assert_eq!(to_json(&inv), to_json(&inv.clone()));
}

#[test]
fn csv_parses_back_and_agrees_with_json_line_for_line() {
    let inv = golden();
    let json: Value = serde_json::from_slice(&to_json(&inv)).unwrap();
    let json_lines = json["lines"].as_array().unwrap();
    let csv_bytes = to_csv(&inv);
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
        assert_eq!(&row[col("invoice_number")], "INV-acme-2026-11");
        assert_eq!(&row[col("tenant")], "acme");
        assert_eq!(&row[col("period_from")], field(&json["period"], "from"));
        assert_eq!(&row[col("period_to")], field(&json["period"], "to"));
        assert_eq!(&row[col("currency")], "CNY");
        // The columns from kind to amount are the line's members of the same names.
        for key in &CSV_HEADER[col("kind")..=col("amount")] {
            assert_eq!(&row[col(key)], field(line, key), "{key}");
        }
        assert_eq!(row[col("records")], line["records"].to_string());
        let adj = &line["adjustment_for"];
        assert_eq!(&row[col("adjustment_for_from")], field(adj, "from"));
        assert_eq!(&row[col("adjustment_for_to")], field(adj, "to"));
    }
    let total = rows.last().unwrap();
    assert_eq!(&total[col("kind")], "total");
    assert_eq!(&total[col("amount")], field(&json, "total"));
    assert_eq!(&total[col("quantity")], "");
    let sum: Decimal = rows[..rows.len() - 1]
        .iter()
        .map(|r| dec(&r[col("amount")]))
        .sum();
    assert_eq!(sum.to_string(), "186.39");
    // The adjustment names its period; current lines leave it empty.
    assert_eq!(&rows[7][col("adjustment_for_from")], "2026-10-01T00:00:00Z");
    assert_eq!(&rows[0][col("adjustment_for_from")], "");
}

#[test]
fn pdf_text_has_number_tenant_total_checkpoint_and_how_to_verify() {
    let inv = golden();
    let pdf = to_pdf(&inv).unwrap();
    assert!(pdf.starts_with(b"%PDF-"));
    let (pages, text) = pdf_text(&pdf);
    assert_eq!(pages, 1);
    for needle in [
        "Invoice INV-acme-2026-11",
        "acme",
        "186.39",
        "4242",
        "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
        "ledger.example/gpuledger",
        "2026-11-01T00:00:00Z",
        "2026-12-01T00:05:00Z",
        "Region west, GPU H100",
        "Region east, GPU H100",
        "28800 GPU-s",
        "18.5 per GPU-h",
        "148.00",
        "3.78",
        "12.5 kWh",
        "PUE 1.08",
        "2026-10-01T00:00:00Z",
        "How to verify",
        "gpuledger verify-log",
        "Page 1 of 1",
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} not in the PDF text:\n{text}"
        );
    }
}

#[test]
fn a_long_invoice_paginates_and_keeps_its_total() {
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
    inv.total = inv.sum_of_lines();
    let total = inv.total.to_string();
    let (pages, text) = pdf_text(&to_pdf(&inv).unwrap());
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
    inv.tenant = "t\u{e9}nant\u{7}\u{4e2d}".into();
    inv.lines[0].region = "r".repeat(128);
    inv.lines[0].gpu_model = Some("M".repeat(128));
    inv.lines[0].quantity = dec("79228162514264337593543950.335");
    let (_, text) = pdf_text(&to_pdf(&inv).unwrap());
    assert!(text.contains("t?nant??"), "{text}");
    assert!(text.contains("rrrrrrrrrr"));
    assert!(text.contains("79228162514264337593543950.335 GPU-s"));
}

#[test]
fn pdf_refuses_an_inconsistent_or_oversized_invoice() {
    let mut inv = golden();
    inv.total = dec("1.00");
    assert!(matches!(
        to_pdf(&inv),
        Err(RenderError::TotalMismatch { total, sum, .. })
            if total == dec("1.00") && sum == dec("186.39")
    ));

    // At the limit it renders (a few hundred pages, in well under a second); one more is refused.
    let mut inv = golden();
    let line = inv.lines[0].clone();
    inv.lines = vec![line.clone(); MAX_PDF_LINES];
    inv.total = inv.sum_of_lines();
    assert!(to_pdf(&inv).unwrap().starts_with(b"%PDF-"));
    inv.lines.push(line);
    inv.total = inv.sum_of_lines();
    let err = to_pdf(&inv).unwrap_err();
    assert_eq!(
        err,
        RenderError::TooManyLines {
            number: inv.number.clone(),
            lines: MAX_PDF_LINES + 1
        }
    );
    assert!(err.to_string().contains("CSV or JSON"));
}
