//! Issue #27 item 5, disputes without billing, over HTTP on SQLite and PostgreSQL: an admin
//! excludes a logged record of a tenant from rating (`POST /v1/exclusions`, a `record_excluded`
//! entry). The preview and the invoice leave it out and list it as excluded; a second
//! exclusion, another tenant's record, an entry that is no record, an unknown tenant and a
//! record an invoice already rated are refused with their reasons and write nothing; a late
//! record is excludable until an invoice rates it; `gpuledger verify --invoice` recomputes the
//! invoice from its bundle, exclusions included, and names an invoice that rates an excluded
//! record; verify-log passes the whole log.

mod common;

use common::*;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use serde_json::{json, Value};

/// The reason and field of a refused admin write, or its status.
fn refusal(r: &Reply) -> String {
    if r.status == 201 {
        return "201".into();
    }
    let p = r.json();
    format!(
        "{} {} {}",
        r.status,
        p["errors"][0]["reason"].as_str().unwrap_or("-"),
        p["errors"][0]["field"].as_str().unwrap_or("-")
    )
}

both_backends!(
    a_disputed_record_is_excluded_from_rating_not_from_the_log,
    |db: &TestDb| {
        let log = init(db);
        let day = base_day();
        // 3600 CNY per GPU-hour: one GPU for a 10 s record is 10.00.
        log.write_at(day.plus(-86_400), sample_prices(day.plus(-86_400), "3600"));
        let srv = log.serve();
        let h = srv.http();
        let admin = log.admin.clone();
        let a = Some(admin.as_str());
        h.parties(&admin, &["acme", "beta"]);
        let key = sample::key("node-1");
        h.register(&admin, "node-1", "node", &key);
        let usage = |seq: u64, tenant: &str, end: Timestamp| {
            sample::usage("node-1", &key, seq, tenant, dec("1"), end)
        };
        // acme: [0 s, 10 s) and [10 s, 20 s) of the day; beta: [0 s, 10 s).
        let ans = h.post_records(&[
            usage(1, "acme", day.plus(10)),
            usage(2, "acme", day.plus(20)),
            usage(3, "beta", day.plus(10)),
        ]);
        let index = |i: usize| ans["outcomes"][i]["index"].as_u64().unwrap();
        let (first, disputed, betas) = (index(0), index(1), index(2));
        let period = format!("tenant=acme&from={day}&to={}", day.plus(86_400));
        let preview = || {
            h.get(&format!("/v1/invoices/preview?{period}"), a)
                .ok_json(200)
        };
        assert_eq!(preview()["currencies"][0]["total"], "20.00");
        assert_eq!(preview()["excluded"], json!([]));

        let reason = "node-1 counted [10 s, 20 s) twice during a driver reload";
        let exclude = |tenant: &str, entry: Value, reason: &str| {
            h.post(
                "/v1/exclusions",
                a,
                &json!({"tenant": tenant, "entry": entry, "reason": reason}),
            )
        };
        let r = exclude("acme", json!(disputed), reason);
        assert_eq!(r.status, 201, "{}", r.lossy());
        assert_eq!(r.json()["kind"], "record_excluded");
        let p = preview();
        assert_eq!(
            p["currencies"][0]["total"], "10.00",
            "the disputed 10 s are not rated: {p}"
        );
        assert_eq!(
            p["excluded"],
            json!([{"entry": disputed, "reason": reason}])
        );

        // Refused, each with its reason, writing nothing.
        let size = h.size();
        let tenant = h.secret(&admin, json!({"role": "tenant", "tenant": "acme"}));
        for (what, r, want) in [
            (
                "the same record again",
                exclude("acme", json!(disputed), "again"),
                "400 already_excluded body.entry",
            ),
            (
                "beta's record for acme",
                exclude("acme", json!(betas), reason),
                "400 unknown_record body.entry",
            ),
            (
                "the log policy entry",
                exclude("acme", json!(0), reason),
                "400 unknown_record body.entry",
            ),
            (
                "an entry beyond the log",
                exclude("acme", json!(size + 10), reason),
                "400 unknown_record body.entry",
            ),
            (
                "an unregistered tenant",
                exclude("ghost", json!(first), reason),
                "400 unknown_tenant body.tenant",
            ),
            (
                "an empty reason",
                exclude("acme", json!(first), ""),
                "400 invalid_field body.reason",
            ),
            (
                "a reason of 501 bytes",
                exclude("acme", json!(first), &"r".repeat(501)),
                "400 invalid_field body.reason",
            ),
            (
                "an entry that is not an integer",
                exclude("acme", json!("1"), reason),
                "400 malformed body",
            ),
            (
                "a tenant token",
                h.post(
                    "/v1/exclusions",
                    Some(&tenant),
                    &json!({"tenant": "acme", "entry": first, "reason": reason}),
                ),
                "403 - -",
            ),
        ] {
            assert_eq!(refusal(&r), want, "{what}: {}", r.lossy());
        }
        assert_eq!(h.size(), size, "no refused exclusion reached the log");
        // beta's own dispute: on nothing of acme's.
        let r = exclude("beta", json!(betas), "beta's dispute");
        assert_eq!(r.status, 201, "{}", r.lossy());

        // The invoice rates the first record only and lists the disputed one.
        let invoice =
            json!({"tenant": "acme", "from": day.to_string(), "to": day.plus(86_400).to_string()});
        let issued = h.post("/v1/invoices", a, &invoice).ok_json(201);
        let inv = &issued[0];
        assert_eq!(inv["total"], "10.00", "{inv}");
        assert_eq!(inv["lines"][0]["records"], 1);
        assert_eq!(
            inv["excluded"],
            json!([{"entry": disputed, "reason": reason}])
        );
        let number = inv["number"].as_str().unwrap().to_owned();
        // A tenant reads its own invoice, exclusions included; beta's token does not see it.
        let own = h.get(&format!("/v1/invoices/{number}"), Some(&tenant));
        assert_eq!(own.json()["excluded"], inv["excluded"]);
        // The CSV lists it too: a row of kind `excluded`, before the total, priced nowhere.
        let csv = h.get(&format!("/v1/invoices/{number}/csv"), Some(&tenant));
        let mut reader = csv::Reader::from_reader(csv.body.as_slice());
        let header = reader.headers().unwrap().clone();
        let col = |name: &str| header.iter().position(|h| h == name).unwrap();
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        let kinds: Vec<&str> = rows.iter().map(|r| &r[col("kind")]).collect();
        assert_eq!(kinds, ["gpu", "excluded", "total"], "{}", csv.lossy());
        let x = &rows[1];
        assert_eq!(
            (
                &x[col("excluded_entry")],
                &x[col("description")],
                &x[col("records")],
                &x[col("gross")]
            ),
            (disputed.to_string().as_str(), reason, "1", ""),
            "{}",
            csv.lossy()
        );
        let beta = h.secret(&admin, json!({"role": "tenant", "tenant": "beta"}));
        assert_eq!(
            h.get(&format!("/v1/invoices/{number}"), Some(&beta)).status,
            404
        );

        // Offline: the invoice recomputes from its bundle, which carries the exclusion and the
        // excluded record; the same invoice claiming the record rated does not.
        let dir = tempfile::tempdir().unwrap();
        let fetch = |fmt: &str| h.get(&format!("/v1/invoices/{number}/{fmt}"), a).body;
        let json_doc = fetch("json");
        std::fs::write(dir.path().join("inv.json"), &json_doc).unwrap();
        let bundle = fetch("bundle");
        // acme's bundle carries acme's exclusion and the record it excludes, nothing of beta's.
        let text = String::from_utf8_lossy(&bundle);
        assert_eq!(text.matches("record_excluded").count(), 1, "{text}");
        assert!(
            !text.contains("beta"),
            "another tenant's entries in acme's bundle"
        );
        std::fs::write(dir.path().join("inv.bundle"), &bundle).unwrap();
        let vkey = h.get("/v1/log", None).ok_json(200)["verifier_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let files = ["--invoice", "inv.json", "--bundle", "inv.bundle"];
        assert_verify_passes(dir.path(), &files, &vkey, "PASS: invoice");
        let mut claims: Value = serde_json::from_slice(&json_doc).unwrap();
        claims.as_object_mut().unwrap().remove("excluded");
        std::fs::write(dir.path().join("hidden.json"), claims.to_string()).unwrap();
        let out = bin()
            .args([
                "verify",
                "--json",
                "--invoice",
                "hidden.json",
                "--bundle",
                "inv.bundle",
            ])
            .args(["--log-key", &vkey])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (&v["result"], &v["reason"], &v["item"]),
            (&json!("FAIL"), &json!("claim_mismatch"), &json!("excluded")),
            "{v}"
        );

        // Once invoiced, a record is credited, not excluded.
        let r = exclude("acme", json!(first), reason);
        assert_eq!(
            refusal(&r),
            "400 record_invoiced body.entry",
            "{}",
            r.lossy()
        );

        // A late record of the invoiced day is excludable until an invoice rates it: the next
        // day's invoice lists it as excluded, with no adjustment line.
        let ans = h.post_records(&[
            usage(4, "acme", day.plus(30)),
            usage(5, "acme", day.plus(86_410)),
        ]);
        let late = ans["outcomes"][0]["index"].as_u64().unwrap();
        assert_eq!(
            exclude("acme", json!(late), "late and disputed").status,
            201
        );
        let next = json!({"tenant": "acme", "from": day.plus(86_400).to_string(),
                          "to": day.plus(2 * 86_400).to_string()});
        let issued = h.post("/v1/invoices", a, &next).ok_json(201);
        let inv = &issued[0];
        assert_eq!(inv["total"], "10.00", "{inv}");
        assert!(
            inv["lines"]
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l.get("adjustment_for").is_none()),
            "{inv}"
        );
        assert_eq!(
            inv["excluded"],
            json!([{"entry": late, "reason": "late and disputed"}])
        );
        let number = inv["number"].as_str().unwrap().to_owned();
        let fetch = |fmt: &str| h.get(&format!("/v1/invoices/{number}/{fmt}"), a).body;
        std::fs::write(dir.path().join("next.json"), fetch("json")).unwrap();
        std::fs::write(dir.path().join("next.bundle"), fetch("bundle")).unwrap();
        let files = ["--invoice", "next.json", "--bundle", "next.bundle"];
        assert_verify_passes(dir.path(), &files, &vkey, "PASS: invoice");
        let size = h.size();
        drop(srv);
        log.assert_verifies(size);
    }
);
