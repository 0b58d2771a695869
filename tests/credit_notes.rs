//! Credit notes as numbered documents (issue #23), over real HTTP on SQLite and PostgreSQL:
//! `POST /v1/credit-notes` answers the number `CN-<log index>`, the same string the FOCUS
//! export writes as the credit's `InvoiceId`; `GET /v1/credit-notes/{number}` and its `json`,
//! `csv` and `pdf` downloads; tenants see only their own (another tenant's number is 404, like
//! an unknown one); malformed numbers are 400 `invalid_parameter`; every PDF download is the same
//! bytes, and its labels read back (English, Chinese by `?lang=` or by the invoice's bill-to);
//! the invoice's account names its credit notes by number.

mod common;

use common::*;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use serde_json::{json, Value};
use std::collections::HashMap;

fn end_of(seq: u64) -> Timestamp {
    base_day().plus(10 * seq as i64)
}

fn pdf_text(pdf: &[u8]) -> String {
    assert!(pdf.starts_with(b"%PDF-"), "not a PDF");
    let doc = lopdf::Document::load_mem(pdf).expect("the PDF parses");
    let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
    doc.extract_text(&pages).expect("text extracts")
}

/// The rows of a CSV body, each by its header's names.
fn csv_rows(body: &[u8]) -> Vec<HashMap<String, String>> {
    let mut r = csv::Reader::from_reader(body);
    let header: Vec<String> = r.headers().unwrap().iter().map(str::to_owned).collect();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            header
                .iter()
                .cloned()
                .zip(rec.iter().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// What the scenario made: the server, a client, the tokens and the credit notes' numbers.
struct World {
    _srv: Server,
    h: Http,
    admin: String,
    auditor: String,
    tenant_a: String,
    tenant_b: String,
    /// A's credit note against INV-000001 (and its POST answer).
    cn_a: String,
    posted_a: Value,
    /// The Chinese-named tenant's credit note.
    cn_zh: String,
    /// The log index of one of A's usage records (an entry that is no credit note).
    usage_a: u64,
}

/// Tenants A, B and one named in Chinese, each with a usage record of the day before and its
/// invoice for that day; a payment and a credit note against A's invoice, and a credit note
/// against the Chinese-named tenant's.
fn world(db: &TestDb) -> World {
    let log = init(db);
    let day = base_day();
    // The prices, logged a day before the records as they took effect (no price may take
    // effect in the past): 3600 a GPU-hour, so a GPU for one 10 s record is 10.00.
    let from = day.plus(-86_400);
    log.write_at(from, sample_prices(from, "3600"));
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    h.post(
        "/v1/tenants",
        a,
        &json!({"id": "tenant-zh", "name": "北京算力科技有限公司", "address": ["北京市海淀区中关村大街1号"]}),
    )
    .ok_json(201);
    h.parties(&admin, &["tenant-a", "tenant-b", "tenant-zh"]);
    let k = sample::key("credit-note-node");
    h.register(&admin, "node-1", "node", &k);
    let batch = vec![
        sample::usage("node-1", &k, 1, "tenant-a", dec("1"), end_of(1)),
        sample::usage("node-1", &k, 2, "tenant-b", dec("1"), end_of(2)),
        sample::usage("node-1", &k, 3, "tenant-zh", dec("1"), end_of(3)),
    ];
    let ans = h.post_records(&batch);
    let usage_a = each_u64(&ans["outcomes"], "/index")[0];
    let (from, to) = (day.to_string(), day.plus(86_400).to_string());
    let mut numbers = Vec::new();
    for t in ["tenant-a", "tenant-b", "tenant-zh"] {
        let issued = h
            .post(
                "/v1/invoices",
                a,
                &json!({"tenant": t, "from": from, "to": to}),
            )
            .ok_json(201);
        numbers.push(issued[0]["number"].as_str().unwrap().to_owned());
    }
    assert_eq!(numbers, ["INV-000001", "INV-000002", "INV-000003"]);
    h.post(
        "/v1/payments",
        a,
        &json!({"tenant": "tenant-a", "invoice": "INV-000001", "currency": "CNY", "amount": "1.00", "note": "bank transfer"}),
    )
    .ok_json(201);
    let posted_a = h
        .post(
            "/v1/credit-notes",
            a,
            &json!({"tenant": "tenant-a", "invoice": "INV-000001", "currency": "CNY", "amount": "4.00",
                    "note": "SLA credit: 2 h outage"}),
        )
        .ok_json(201);
    let posted_zh = h
        .post(
            "/v1/credit-notes",
            a,
            &json!({"tenant": "tenant-zh", "invoice": "INV-000003", "currency": "CNY", "amount": "2.50",
                    "note": "服务中断补偿"}),
        )
        .ok_json(201);
    let auditor = h.secret(&admin, json!({"role": "auditor"}));
    let tenant_a = h.secret(&admin, json!({"role": "tenant", "tenant": "tenant-a"}));
    let tenant_b = h.secret(&admin, json!({"role": "tenant", "tenant": "tenant-b"}));
    World {
        cn_a: posted_a["number"].as_str().unwrap().to_owned(),
        cn_zh: posted_zh["number"].as_str().unwrap().to_owned(),
        posted_a,
        _srv: srv,
        h,
        admin,
        auditor,
        tenant_a,
        tenant_b,
        usage_a,
    }
}

both_backends!(the_number_is_the_focus_invoice_id, |db: &TestDb| {
    let w = world(db);
    let index = w.posted_a["index"].as_u64().unwrap();
    // `index` and `kind` stay, for the clients that read them.
    assert_eq!(w.posted_a["kind"], "credit_note");
    assert_eq!(w.cn_a, format!("CN-{index}"));
    assert_eq!(
        w.cn_a,
        gpuledger::core::invoice::credit_note_number(index),
        "one function names credit notes"
    );
    let day = base_day();
    let focus = w.h.get(
        &format!(
            "/v1/exports/focus?tenant=tenant-a&from={day}&to={}",
            day.plus(86_400)
        ),
        Some(&w.admin),
    );
    assert_eq!(focus.status, 200, "{}", focus.lossy());
    let credits: Vec<_> = csv_rows(&focus.body)
        .into_iter()
        .filter(|r| r["ChargeCategory"] == "Credit")
        .collect();
    assert_eq!(credits.len(), 1, "{credits:?}");
    assert_eq!(credits[0]["InvoiceId"], w.cn_a);
    assert_eq!(credits[0]["x_InvoiceNumber"], "INV-000001");
    assert_eq!(credits[0]["BilledCost"], "-4.00");

    // The invoice's account names its credit notes by number; payments have none.
    let account =
        w.h.get("/v1/invoices/INV-000001/account", Some(&w.tenant_a))
            .ok_json(200);
    let s = account["settlements"].as_array().unwrap();
    assert_eq!(s.len(), 2, "{account}");
    assert_eq!(s[0]["kind"], "payment");
    assert!(s[0].get("number").is_none(), "{account}");
    assert_eq!(s[1]["kind"], "credit_note");
    assert_eq!(s[1]["number"], w.cn_a.as_str());
    assert_eq!(s[1]["index"], index);
});

both_backends!(get_json_csv_and_pdf, |db: &TestDb| {
    let w = world(db);
    let path = format!("/v1/credit-notes/{}", w.cn_a);
    let doc = w.h.get(&path, Some(&w.admin)).ok_json(200);
    assert_eq!(doc["format"], "gpuledger-credit-note/v1");
    assert_eq!(doc["number"], w.cn_a.as_str());
    assert_eq!(doc["index"], w.posted_a["index"]);
    assert_eq!(doc["tenant"], "tenant-a");
    assert_eq!(doc["invoice"], "INV-000001");
    assert_eq!(doc["currency"], "CNY");
    assert_eq!(doc["amount"], "4.00");
    assert_eq!(doc["note"], "SLA credit: 2 h outage");
    let invoice =
        w.h.get("/v1/invoices/INV-000001", Some(&w.admin))
            .ok_json(200);
    let total = invoice["total"].as_str().unwrap().to_owned();
    assert_eq!(doc["invoice_total"], total.as_str());
    let day = base_day();
    assert_eq!(doc["invoice_period"]["from"], day.to_string());
    assert_eq!(doc["invoice_period"]["to"], day.plus(86_400).to_string());
    assert_eq!(doc["log_origin"], sample::ORIGIN);
    let recorded = Timestamp::parse(doc["recorded_at"].as_str().unwrap()).unwrap();
    assert!(recorded <= Timestamp::now());

    // The same document for every reader that may see it, and as the `json` download.
    let first = w.h.get(&path, Some(&w.admin));
    for token in [&w.auditor, &w.tenant_a] {
        assert_eq!(w.h.get(&path, Some(token)).body, first.body);
    }
    let json = w.h.get(&format!("{path}/json"), Some(&w.tenant_a));
    assert_eq!(json.status, 200);
    assert!(json.content_type.starts_with("application/json"));
    assert_eq!(json.body, first.body);

    let csv = w.h.get(&format!("{path}/csv"), Some(&w.tenant_a));
    assert_eq!(csv.status, 200);
    assert!(csv.content_type.starts_with("text/csv"));
    let rows = csv_rows(&csv.body);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["number"], w.cn_a);
    assert_eq!(rows[0]["amount"], "4.00");
    assert_eq!(rows[0]["invoice"], "INV-000001");
    assert_eq!(rows[0]["recorded_at"], doc["recorded_at"].as_str().unwrap());

    // The PDF: the same bytes on every download, whoever downloads it; labels read back.
    let pdf = w.h.get(&format!("{path}/pdf"), Some(&w.admin));
    assert_eq!(pdf.status, 200, "{}", pdf.lossy());
    assert_eq!(pdf.content_type, "application/pdf");
    for token in [&w.admin, &w.auditor, &w.tenant_a] {
        let again = w.h.get(&format!("{path}/pdf"), Some(token));
        assert_eq!(again.body, pdf.body, "the PDF changed between downloads");
    }
    let text = pdf_text(&pdf.body);
    for label in [
        "Credit note",
        w.cn_a.as_str(),
        "Credits invoice",
        "INV-000001",
        "Amount credited (CNY)",
        "4.00",
        &format!("{total} CNY"),
        "Reason",
        "SLA credit: 2 h outage",
        "Bill to",
        "tenant-a",
        "How to verify",
        "/v1/proofs/inclusion?index=",
    ] {
        assert!(text.contains(label), "{label:?} is not in the PDF:\n{text}");
    }
    assert!(!text.contains("贷项通知单"), "English by default:\n{text}");

    // Chinese when asked for, and the same Chinese bytes each time.
    let zh =
        w.h.get(&format!("{path}/pdf?lang=zh-CN"), Some(&w.tenant_a));
    assert_eq!(zh.status, 200);
    assert_ne!(zh.body, pdf.body);
    assert_eq!(
        w.h.get(&format!("{path}/pdf?lang=zh-CN"), Some(&w.tenant_a))
            .body,
        zh.body
    );
    let text = pdf_text(&zh.body);
    for label in [
        "贷项通知单",
        "冲减账单",
        "冲减金额",
        "如何验证",
        "INV-000001",
    ] {
        assert!(text.contains(label), "{label:?} is not in the PDF:\n{text}");
    }
    // A tenant whose bill-to is written in Chinese gets Chinese by default, as its invoices do.
    let zh_default =
        w.h.get(&format!("/v1/credit-notes/{}/pdf", w.cn_zh), Some(&w.admin));
    assert_eq!(zh_default.status, 200);
    let text = pdf_text(&zh_default.body);
    for label in ["贷项通知单", "北京算力科技有限公司", "服务中断补偿", "2.50"]
    {
        assert!(text.contains(label), "{label:?} is not in the PDF:\n{text}");
    }
    let en = w.h.get(
        &format!("/v1/credit-notes/{}/pdf?lang=en", w.cn_zh),
        Some(&w.admin),
    );
    assert!(pdf_text(&en.body).contains("Amount credited"));

    // Formats and languages that are not served.
    w.h.get(&format!("{path}/xml"), Some(&w.admin))
        .assert_problem(400, "invalid_parameter", "xml");
    w.h.get(&format!("{path}/pdf?lang=fr"), Some(&w.admin))
        .assert_problem(400, "invalid_parameter", "lang=fr");
});

both_backends!(tenants_see_only_their_own, |db: &TestDb| {
    let w = world(db);
    for suffix in ["", "/json", "/csv", "/pdf"] {
        let a = format!("/v1/credit-notes/{}{suffix}", w.cn_a);
        assert_eq!(w.h.get(&a, Some(&w.tenant_a)).status, 200, "{a}");
        assert_eq!(w.h.get(&a, Some(&w.auditor)).status, 200, "{a}");
        // Another tenant's number: 404, exactly as for one that does not exist.
        let theirs = w.h.get(&a, Some(&w.tenant_b));
        let p = theirs.assert_problem(404, "not_found", &a);
        let unknown = w.h.get(
            &format!("/v1/credit-notes/CN-999999{suffix}"),
            Some(&w.tenant_b),
        );
        let q = unknown.assert_problem(404, "not_found", "CN-999999");
        assert_eq!(p["title"], q["title"]);
        let zh = format!("/v1/credit-notes/{}{suffix}", w.cn_zh);
        w.h.get(&zh, Some(&w.tenant_a))
            .assert_problem(404, "not_found", &zh);
        // An entry that is not a credit note, even the caller's own, is no credit note.
        let usage = format!("/v1/credit-notes/CN-{}{suffix}", w.usage_a);
        for token in [&w.admin, &w.tenant_a] {
            w.h.get(&usage, Some(token))
                .assert_problem(404, "not_found", &usage);
        }
        assert_eq!(w.h.get(&a, None).status, 401);
    }
    // Only admins grant them.
    let body =
        json!({"tenant": "tenant-a", "invoice": "INV-000001", "currency": "CNY", "amount": "0.01"});
    for token in [&w.auditor, &w.tenant_a] {
        w.h.post("/v1/credit-notes", Some(token), &body)
            .assert_problem(403, "forbidden", "credit note by a non-admin");
    }
});

both_backends!(malformed_numbers_are_400, |db: &TestDb| {
    let w = world(db);
    let index = w.posted_a["index"].as_u64().unwrap();
    for bad in [
        "CN-".to_owned(),
        format!("CN-0{index}"),
        format!("cn-{index}"),
        format!("CN-+{index}"),
        format!("CN-{index}x"),
        format!("{index}"),
        "INV-000001".to_owned(),
        "CN-9007199254740992".to_owned(),
        "CN-99999999999999999999999".to_owned(),
        "CN-%E4%B8%80".to_owned(),
    ] {
        for suffix in ["", "/pdf", "/json", "/csv"] {
            let path = format!("/v1/credit-notes/{bad}{suffix}");
            for token in [&w.admin, &w.tenant_b] {
                let p =
                    w.h.get(&path, Some(token))
                        .assert_problem(400, "invalid_parameter", &path);
                assert_eq!(p["errors"][0]["field"], "number", "{path}: {p}");
            }
        }
    }
    // The largest index a log can have is well formed: unknown, not malformed.
    w.h.get("/v1/credit-notes/CN-9007199254740991", Some(&w.admin))
        .assert_problem(404, "not_found", "CN-9007199254740991");
});

// Idempotency-Key (#27, item 7): a payment retried with its key after a lost answer is
// recorded once and answered the same; the key sent with another payment is 422 and changes
// nothing; a refused request keeps nothing, so the corrected one may use its key; another
// token's request under the same key is its own, never given the kept answer.
both_backends!(
    a_payment_retried_with_its_key_is_recorded_once,
    |db: &TestDb| {
        let w = world(db);
        let h = &w.h;
        let send = |token: &str, key: &str, body: &Value| -> Reply {
            let r = h
                .agent
                .post(&format!("{}/v1/payments", h.base))
                .header("Authorization", &format!("Bearer {token}"))
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .send(body.to_string().as_bytes());
            Http::read(r).unwrap()
        };
        let payment = json!({"tenant": "tenant-a", "invoice": "INV-000001", "currency": "CNY",
                         "amount": "2.00", "note": "retried after a timeout"});
        let before = h.size();
        let first = send(&w.admin, "pay-2026-12-06-1", &payment);
        first.ok_json(201);
        let again = send(&w.admin, "pay-2026-12-06-1", &payment);
        again.ok_json(201);
        assert_eq!(again.body, first.body, "the first answer, byte for byte");
        assert_eq!(h.size(), before + 1, "one payment entry");
        let mut other = payment.clone();
        other["amount"] = json!("3.00");
        send(&w.admin, "pay-2026-12-06-1", &other).assert_problem(
            422,
            "idempotency_key_reused",
            "the key with another payment",
        );
        assert_eq!(h.size(), before + 1, "a reused key changed the log");
        // Keys are per token: another caller sending the same key and body is not given the kept
        // answer (a tenant may not record payments at all), and changes nothing.
        send(&w.tenant_a, "pay-2026-12-06-1", &payment).assert_problem(
            403,
            "forbidden",
            "a tenant replaying the admin's key",
        );
        assert_eq!(
            h.size(),
            before + 1,
            "another token's replay changed the log"
        );
        // Refused (above the open balance): nothing kept, the corrected request runs.
        let mut over = payment.clone();
        over["amount"] = json!("1000000.00");
        send(&w.admin, "pay-2026-12-06-2", &over).assert_problem(422, "overpayment", "overpayment");
        send(&w.admin, "pay-2026-12-06-2", &payment).ok_json(201);
        assert_eq!(h.size(), before + 2);
        // Bad keys are refused before anything runs.
        send(&w.admin, "a key with spaces", &payment).assert_problem(
            400,
            "invalid_parameter",
            "a key with spaces",
        );
        assert_eq!(h.size(), before + 2);
        // The paid amount counts each payment once: 1.00 (the world's) + 2.00 + 2.00.
        let account = h
            .get("/v1/invoices/INV-000001/account", Some(&w.admin))
            .ok_json(200);
        assert_eq!(account["paid"], "5.00", "{account}");
    }
);

both_backends!(
    a_payment_is_recorded_once_per_external_reference,
    |db: &TestDb| {
        let w = world(db);
        let h = &w.h;
        let pay = |tenant: &str, invoice: &str, amount: &str, reference: &str| {
            json!({"tenant": tenant, "invoice": invoice, "currency": "CNY", "amount": amount,
                   "note": "bank statement line", "external_reference": reference})
        };
        let before = h.size();
        let first = h
            .post(
                "/v1/payments",
                Some(&w.admin),
                &pay("tenant-a", "INV-000001", "2.00", "CMB-20261206-0001"),
            )
            .ok_json(201);
        assert_eq!(h.size(), before + 1);
        // The same bank line imported again (no Idempotency-Key: another day, another
        // importer), and the reference under another amount: both refused, naming the entry.
        for (what, amount) in [("the same payment", "2.00"), ("another amount", "3.00")] {
            let again = h.post(
                "/v1/payments",
                Some(&w.admin),
                &pay("tenant-a", "INV-000001", amount, "CMB-20261206-0001"),
            );
            let problem = again.assert_problem(409, "conflict", what);
            let detail = problem["detail"].as_str().unwrap_or_default().to_owned();
            assert!(
                detail.contains(&format!("entry {}", first["index"])),
                "{what}: {detail}"
            );
            assert_eq!(h.size(), before + 1, "{what} changed the log");
        }
        // Unique per tenant: another tenant's bank line may carry the same reference.
        h.post(
            "/v1/payments",
            Some(&w.admin),
            &pay("tenant-b", "INV-000002", "1.00", "CMB-20261206-0001"),
        )
        .ok_json(201);
        // A reference that is not one: 400, nothing written.
        for bad in ["", " CMB-1", "CMB\n1", &"x".repeat(129)] {
            let r = h.post(
                "/v1/payments",
                Some(&w.admin),
                &pay("tenant-a", "INV-000001", "1.00", bad),
            );
            assert_eq!(
                r.status,
                400,
                "{bad:?}: {}",
                String::from_utf8_lossy(&r.body)
            );
            assert!(
                String::from_utf8_lossy(&r.body).contains("body.external_reference"),
                "{bad:?}"
            );
        }
        assert_eq!(h.size(), before + 2);
        // The tenant paid 1.00 (the world's) + 2.00, once.
        let account = h
            .get("/v1/invoices/INV-000001/account", Some(&w.admin))
            .ok_json(200);
        assert_eq!(account["paid"], "3.00", "{account}");
        // verify-log rechecks the rule over the whole log (tests/trust.rs breaks it).
        assert_eq!(verified(&db.url).size, h.size());
    }
);
