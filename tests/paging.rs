//! Cursor paging and date filters of the lists (`/v1/invoices`, `/v1/certificates`,
//! `/v1/tenants`, `/v1/prices`) over real HTTP on both backends: a walk of more items than a
//! page loses and repeats nothing, also when items are added during it; a tenant's walk shows
//! only its own items on every page and its cursor is refused in another scope; limits at
//! their edge, malformed and foreign cursors, date filters, prices by series and as of an
//! instant; and the OpenAPI document says all of it.

mod common;

use common::*;
use gpuledger::api::paging::{DEFAULT_LIMIT, MAX_LIMIT};
use gpuledger::core::certificate::Scope;
use gpuledger::core::invoice::Period;
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::record::{Body, RateCard, Role, TenantRegistered};
use gpuledger::store::access::{self, ApiRole};
use gpuledger::store::certificates::CertificateRequest;
use gpuledger::store::Ledger;
use serde_json::{json, Value};
use std::collections::HashSet;

/// Hour `h` of the test day, as a period (all of them have ended).
fn hour(h: i64) -> Period {
    Period {
        from: at(h * 3600),
        to: at((h + 1) * 3600),
    }
}

/// Ten minutes of one H100 of `tenant` in hour `h` (under its lease), as record `seq` of node-1.
fn use_gpu(ledger: &Ledger, node: &ed25519_dalek::SigningKey, tenant: &str, seq: u64, h: i64) {
    let start = h * 3600 + 60;
    use_one_h100(ledger, node, (tenant, seq), start, start + 600);
}

/// A rate card of west H100s of `class` at `price`, from `from`.
fn rate_card(ledger: &Ledger, class: LeaseClass, price: &str, from: i64) {
    ledger
        .append_ledger_entry(Body::RateCard(RateCard {
            region: "west".into(),
            gpu_model: "H100".into(),
            lease_class: class,
            currency: "CNY".into(),
            price_per_gpu_hour: dec(price),
            effective_from: at(from),
        }))
        .unwrap();
}

/// One page: status, body, and the `Link` and `X-Next-Cursor` headers.
struct Page {
    status: u16,
    body: Value,
    link: Option<String>,
    next: Option<String>,
}

fn get(h: &Http, path: &str, token: &str) -> Page {
    let mut r = h
        .agent
        .get(format!("{}{path}", h.base))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (link, next) = (header("Link"), header("X-Next-Cursor"));
    let text = r.body_mut().read_to_string().unwrap();
    Page {
        status: r.status().as_u16(),
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        link,
        next,
    }
}

/// The path of a `Link: <path>; rel="next"` header.
fn link_path(link: &str) -> String {
    let (target, rel) = link.split_once("; ").unwrap();
    assert_eq!(rel, "rel=\"next\"");
    target
        .strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .unwrap()
        .to_owned()
}

/// Walks a list from `first` by its `Link` headers, calling `between` after each page with
/// the page's number; returns every item and the number of pages. Every page but the last is
/// full and names the same cursor in both headers.
fn walk(
    h: &Http,
    first: &str,
    token: &str,
    limit: usize,
    mut between: impl FnMut(usize),
) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut path = first.to_owned();
    for n in 1.. {
        let p = get(h, &path, token);
        assert_eq!(p.status, 200, "{path}: {}", p.body);
        let page = p.body.as_array().unwrap().clone();
        assert!(page.len() <= limit, "{path}: {} items", page.len());
        items.extend(page.iter().cloned());
        between(n);
        match (p.link, p.next) {
            (Some(link), Some(next)) => {
                assert_eq!(page.len(), limit, "{path}: a page before the last is full");
                path = link_path(&link);
                assert!(path.ends_with(&format!("cursor={next}")), "{path}");
            }
            (None, None) => return (items, n),
            other => panic!("{path}: one header without the other: {other:?}"),
        }
    }
    unreachable!()
}

/// The members `key` of `items`, checked to be distinct.
fn distinct(items: &[Value], key: &str) -> Vec<String> {
    let keys: Vec<String> = items
        .iter()
        .map(|v| v[key].as_str().unwrap().to_owned())
        .collect();
    let set: HashSet<&String> = keys.iter().collect();
    assert_eq!(set.len(), keys.len(), "repeated items: {keys:?}");
    keys
}

fn assert_invalid(p: &Page, field: &str, what: &str) {
    assert_eq!(p.status, 400, "{what}: {}", p.body);
    assert_eq!(
        p.body["type"]
            .as_str()
            .map(|t| t.ends_with("invalid_parameter")),
        Some(true),
        "{what}: {}",
        p.body
    );
    assert_eq!(p.body["errors"][0]["field"], field, "{what}: {}", p.body);
}

struct Tokens {
    admin: String,
    acme: String,
    globex: String,
}

/// A log with acme's usage in hours 0..7 and invoices and certificates of hours 0..5, globex's
/// of hours 0..2 (each under its on-demand lease `lease-<tenant>` of 2 H100s of node-1),
/// tenants `t-00`..`t-04` besides them, and rate cards: west H100 on-demand from
/// a day ago, reserved in five steps a minute apart. The ledger's clock stands where the first
/// card takes effect (no price may take effect in the past) until the cards are logged, then
/// it is the real one.
fn scenario(ledger: &Ledger) -> Tokens {
    ensure_node_in(ledger, "node-1", "west");
    let node = signer_for(ledger, "node-1", Role::Node, &["node-1"]);
    for t in ["acme", "globex"] {
        ledger
            .append_ledger_entry(Body::TenantRegistered(TenantRegistered {
                tenant: t.into(),
            }))
            .unwrap();
        let lease = gpuledger::sample::lease(t);
        lease_with(
            ledger,
            &lease,
            t,
            LeaseClass::OnDemand,
            &[("node-1", "H100", 2)],
        );
    }
    let tokens = ledger
        .with_account_writer(|c| {
            for t in ["acme", "globex", "t-00", "t-01", "t-02", "t-03", "t-04"] {
                access::create_tenant(c, t, t)?;
            }
            let t = |c: &mut _, r, t| access::create_token(c, r, t, "test").map(|x| x.1);
            Ok(Tokens {
                admin: t(c, ApiRole::Admin, None)?,
                acme: t(c, ApiRole::Tenant, Some("acme"))?,
                globex: t(c, ApiRole::Tenant, Some("globex"))?,
            })
        })
        .unwrap();
    rate_card(ledger, LeaseClass::OnDemand, "18.5", -86_400);
    for k in 0..5 {
        rate_card(
            ledger,
            LeaseClass::Reserved,
            &format!("1{k}"),
            -86_400 + 60 * k,
        );
    }
    ledger.set_clock(None);
    for h in 0..7 {
        use_gpu(ledger, &node, "acme", 1 + h as u64, h);
    }
    for h in 0..2 {
        use_gpu(ledger, &node, "globex", 100 + h as u64, h);
    }
    for (tenant, hours) in [("acme", 0..5), ("globex", 0..2)] {
        for h in hours {
            assert_eq!(
                ledger.issuance().invoices(tenant, hour(h)).unwrap().len(),
                1
            );
            ledger
                .issuance()
                .certificate(CertificateRequest {
                    tenant: tenant.into(),
                    period: hour(h),
                    scope: Scope::default(),
                })
                .unwrap();
        }
    }
    tokens
}

both_backends!(lists_walk_in_pages, |db: &TestDb| {
    let dir = tempfile::tempdir().unwrap();
    let key_path = log_key_file(dir.path());
    let tk = {
        // A day back, when the first rate card takes effect (see `scenario`).
        let ledger = open_at(db, at(-86_400));
        scenario(&ledger)
    };
    let (child, base) = spawn_serve(&db.url, &key_path, 0, &[]);
    let _server = Proc(child);
    let h = Http::new(&base);
    let (admin, acme, globex) = (tk.admin.as_str(), tk.acme.as_str(), tk.globex.as_str());
    let order = |tenant: &str, h_: i64| json!({"tenant": tenant, "from": hour(h_).from.to_string(), "to": hour(h_).to.to_string()});

    // Invoices: acme's walk in pages of 2, an invoice issued after its first page.
    let (items, pages) = walk(&h, "/v1/invoices?limit=2", acme, 2, |n| {
        if n == 1 {
            h.post("/v1/invoices", Some(admin), &order("acme", 5))
                .ok_json(201);
        }
    });
    let numbers = distinct(&items, "number");
    assert_eq!(numbers.len(), 6, "{numbers:?}");
    assert_eq!(pages, 3);
    assert!(items.iter().all(|i| i["tenant"] == "acme"));
    let indices: Vec<u64> = items
        .iter()
        .map(|i| i["entry_index"].as_u64().unwrap())
        .collect();
    assert!(
        indices.windows(2).all(|w| w[0] < w[1]),
        "issue order: {indices:?}"
    );
    // Everyone's, in pages of 3: no item lost or repeated; globex sees its own only.
    let (all, _) = walk(&h, "/v1/invoices?limit=3", admin, 3, |_| {});
    assert_eq!(distinct(&all, "number").len(), 8);
    let (own, _) = walk(&h, "/v1/invoices?limit=1", globex, 1, |_| {});
    assert_eq!(own.len(), 2);
    assert!(own.iter().all(|i| i["tenant"] == "globex"));
    // The default page holds everything here, without headers.
    let p = get(&h, "/v1/invoices", acme);
    assert_eq!(
        (p.body.as_array().unwrap().len(), p.link, p.next),
        (6, None, None)
    );
    const { assert!(6 < DEFAULT_LIMIT) };

    // Scope: a tenant's cursor is refused elsewhere; another tenant's id is 404 as before.
    let acme_first = get(&h, "/v1/invoices?limit=2", acme);
    let acme_cursor = acme_first.next.clone().unwrap();
    assert_invalid(
        &get(&h, &format!("/v1/invoices?cursor={acme_cursor}"), globex),
        "cursor",
        "acme's cursor as globex",
    );
    assert_invalid(
        &get(&h, &format!("/v1/invoices?cursor={acme_cursor}"), admin),
        "cursor",
        "acme's cursor in the walk of everyone",
    );
    let all_cursor = get(&h, "/v1/invoices?limit=1", admin).next.unwrap();
    assert_invalid(
        &get(&h, &format!("/v1/invoices?cursor={all_cursor}"), acme),
        "cursor",
        "everyone's cursor as acme",
    );
    assert_eq!(get(&h, "/v1/invoices?tenant=acme", globex).status, 404);
    assert_invalid(
        &get(&h, &format!("/v1/certificates?cursor={acme_cursor}"), acme),
        "cursor",
        "an invoice cursor for certificates",
    );
    // The same cursor as admin naming acme continues acme's walk.
    let p = get(
        &h,
        &format!("/v1/invoices?tenant=acme&cursor={acme_cursor}"),
        admin,
    );
    assert_eq!(p.status, 200);
    assert_eq!(p.body.as_array().unwrap().len(), 4);

    // Limits at their edges, malformed cursors.
    let p = get(&h, &format!("/v1/invoices?limit={MAX_LIMIT}"), admin);
    assert_eq!((p.status, p.body.as_array().unwrap().len()), (200, 8));
    for path in [
        "/v1/invoices",
        "/v1/certificates",
        "/v1/tenants",
        "/v1/prices",
    ] {
        for bad in [
            format!("{}", MAX_LIMIT + 1),
            "0".into(),
            "-1".into(),
            "ten".into(),
        ] {
            assert_invalid(
                &get(&h, &format!("{path}?limit={bad}"), admin),
                "limit",
                path,
            );
        }
        for bad in ["x", "Z2wxfGludm9pY2VzfCp8", "%00", "gl1%7Cinvoices%7C*%7C3"] {
            assert_invalid(
                &get(&h, &format!("{path}?cursor={bad}"), admin),
                "cursor",
                path,
            );
        }
    }

    // Date filters: invoices whose period overlaps [from, to).
    let q = |a: i64, b: i64| format!("from={}&to={}", at(a * 3600), at(b * 3600));
    let p = get(&h, &format!("/v1/invoices?{}", q(2, 4)), acme);
    assert_eq!(p.body.as_array().unwrap().len(), 2, "{}", p.body);
    assert!(p.body.as_array().unwrap().iter().all(|i| {
        let f = i["period_from"].as_str().unwrap();
        f == hour(2).from.to_string() || f == hour(3).from.to_string()
    }));
    let p = get(&h, &format!("/v1/invoices?from={}", at(4 * 3600)), acme);
    assert_eq!(p.body.as_array().unwrap().len(), 2);
    let p = get(
        &h,
        &format!("/v1/invoices?to={}&limit=1", at(3600 + 1)),
        acme,
    );
    assert_eq!(p.body.as_array().unwrap().len(), 1);
    assert!(p.next.is_some(), "hours 0 and 1 overlap [.., 01:00:01)");
    assert_invalid(
        &get(&h, &format!("/v1/invoices?{}", q(4, 2)), acme),
        "to",
        "to before from",
    );
    assert_invalid(
        &get(&h, "/v1/invoices?from=yesterday", acme),
        "from",
        "bad from",
    );

    // Certificates: the same walk, a certificate issued during it.
    let (items, _) = walk(&h, "/v1/certificates?limit=2", acme, 2, |n| {
        if n == 2 {
            h.post("/v1/certificates", Some(admin), &order("acme", 5))
                .ok_json(201);
        }
    });
    assert_eq!(distinct(&items, "id").len(), 6);
    assert!(items.iter().all(|c| c["tenant"] == "acme"));
    let (all, _) = walk(&h, "/v1/certificates?limit=4", admin, 4, |_| {});
    assert_eq!(distinct(&all, "id").len(), 8);
    let p = get(&h, &format!("/v1/certificates?{}", q(1, 3)), globex);
    assert_eq!(
        p.body.as_array().unwrap().len(),
        1,
        "globex has hours 0 and 1"
    );
    assert_eq!(get(&h, "/v1/certificates?tenant=acme", globex).status, 404);

    // Tenants, by id: one created during the walk after its cursor is in it.
    let (items, _) = walk(&h, "/v1/tenants?limit=2", admin, 2, |n| {
        if n == 1 {
            h.post(
                "/v1/tenants",
                Some(admin),
                &json!({"id": "zz-late", "name": "Late"}),
            )
            .ok_json(201);
        }
    });
    let ids = distinct(&items, "id");
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    assert_eq!(ids.len(), 8, "{ids:?}");
    assert_eq!(ids.last().map(String::as_str), Some("zz-late"));
    assert_eq!(get(&h, "/v1/tenants", acme).status, 403);
    let p = get(
        &h,
        &format!("/v1/tenants?from={}", Timestamp::now().plus(86_400)),
        admin,
    );
    assert_eq!(p.body, json!([]));
    let p = get(&h, &format!("/v1/tenants?to={}", at(-86_400)), admin);
    assert_eq!(p.body, json!([]));

    // Prices: by series, paged, and as of an instant.
    let cards = "/v1/prices?kind=rate_card&region=west&gpu_model=H100";
    let (items, pages) = walk(&h, &format!("{cards}&limit=2"), admin, 2, |_| {});
    assert_eq!((items.len(), pages), (6, 3));
    assert!(items.iter().all(|e| e["kind"] == "rate_card"));
    let p = get(&h, &format!("{cards}&lease_class=reserved"), admin);
    assert_eq!(p.body.as_array().unwrap().len(), 5);
    // At a day ago plus 150 s: on-demand's only card, and reserved's third step.
    let p = get(&h, &format!("{cards}&as_of={}", at(-86_400 + 150)), admin);
    let in_force: Vec<(String, String)> = p
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["body"]["lease_class"].as_str().unwrap().to_owned(),
                e["body"]["price_per_gpu_hour"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        in_force,
        [
            ("on_demand".into(), "18.5".into()),
            ("reserved".into(), "12".into())
        ]
    );
    // Before every card, none; paged as of now, one per series.
    let p = get(&h, &format!("{cards}&as_of={}", at(-2 * 86_400)), admin);
    assert_eq!(p.body, json!([]));
    let (items, _) = walk(
        &h,
        &format!("/v1/prices?limit=1&as_of={}", Timestamp::now()),
        admin,
        1,
        |_| {},
    );
    let kinds: Vec<&str> = items.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "rate_card").count(),
        2,
        "{kinds:?}"
    );
    // Tenants see their own leases only, with any filter.
    let p = get(&h, "/v1/prices?kind=lease_registered", acme);
    let leases = p.body.as_array().unwrap();
    assert!(!leases.is_empty());
    assert!(
        leases.iter().all(|e| e["body"]["tenant"] == "acme"),
        "{}",
        p.body
    );
    let p = get(
        &h,
        &format!(
            "/v1/prices?kind=lease_registered&as_of={}",
            Timestamp::now()
        ),
        globex,
    );
    assert!(p
        .body
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["body"]["tenant"] == "globex"));
    // Date filter on effective_from: the reserved steps at +60 s and +120 s.
    let p = get(
        &h,
        &format!("{cards}&from={}&to={}", at(-86_400 + 60), at(-86_400 + 180)),
        admin,
    );
    assert_eq!(p.body.as_array().unwrap().len(), 2, "{}", p.body);
    let admin_cursor = get(&h, "/v1/prices?limit=1", admin).next.unwrap();
    assert_invalid(
        &get(&h, &format!("/v1/prices?cursor={admin_cursor}"), acme),
        "cursor",
        "prices",
    );
    assert_invalid(&get(&h, "/v1/prices?kind=gpu_usage", admin), "kind", "kind");
    assert_invalid(
        &get(&h, "/v1/prices?lease_class=cheap", admin),
        "lease_class",
        "class",
    );
    assert_invalid(
        &get(
            &h,
            &format!("/v1/prices?as_of={}&from={}", at(0), at(0)),
            admin,
        ),
        "as_of",
        "as_of with from",
    );
    assert_invalid(
        &get(&h, "/v1/prices?as_of=now", admin),
        "as_of",
        "bad as_of",
    );
});

use gpuledger::core::time::Timestamp;

/// The document names the paging parameters of every list, `limit` bounded by [`MAX_LIMIT`],
/// and the two headers of its 200 answer.
#[test]
fn openapi_documents_paging() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    for (path, filters) in [
        ("/v1/invoices", &["tenant", "from", "to"][..]),
        ("/v1/certificates", &["tenant", "from", "to"]),
        ("/v1/tenants", &["from", "to"]),
        (
            "/v1/prices",
            &[
                "kind",
                "region",
                "gpu_model",
                "lease_class",
                "as_of",
                "from",
                "to",
            ],
        ),
    ] {
        let op = &doc["paths"][path]["get"];
        let params = op["parameters"].as_array().unwrap();
        let named = |n: &str| params.iter().find(|p| p["name"] == n && p["in"] == "query");
        for n in filters.iter().chain(&["limit", "cursor"]) {
            let p = named(n).unwrap_or_else(|| panic!("{path}: {n} is not documented"));
            assert_eq!(p["required"], false, "{path} {n}");
        }
        let limit = &named("limit").unwrap()["schema"];
        assert_eq!(limit["type"], "integer", "{path}");
        assert_eq!(limit["minimum"].as_f64(), Some(1.0), "{path}");
        assert_eq!(limit["maximum"].as_f64(), Some(MAX_LIMIT as f64), "{path}");
        let headers = &op["responses"]["200"]["headers"];
        assert!(
            headers["Link"].is_object() && headers["X-Next-Cursor"].is_object(),
            "{path}"
        );
        assert!(op["responses"]["400"].is_object(), "{path}");
        assert_eq!(
            op["responses"]["200"]["content"]["application/json"]["schema"]["type"], "array",
            "{path}: the body stays an array"
        );
    }
}
