//! Optional token expiry, on both backends: `gpuledger token create --expires` and
//! `POST /v1/tokens` with `expires_at`; an expired token is answered 401 `token_expired` and a
//! revoked one 401 `token_revoked`, but only to the holder of the whole token: an unknown token,
//! or a real token id with a wrong secret, stays the generic 401 `unauthorized`; listings show
//! the expiry.

mod common;

use common::*;
use gpuledger::core::time::Timestamp;
use gpuledger::store::{self, access};
use serde_json::json;
use std::time::Duration;

/// `gpuledger token ARGS… --database-url URL`: exit code and stdout.
fn token_cli(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = bin()
        .arg("token")
        .args(args)
        .args(["--database-url", url])
        .env_remove("GPULEDGER_DATABASE_URL")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

both_backends!(store_refuses_expired_tokens, |db: &TestDb| {
    let _ledger = open(db);
    let mut c = store::connect(&db.url).unwrap();
    let now = Timestamp::now();
    let (info, secret) = access::create_token_expiring(
        &mut c,
        access::ApiRole::Auditor,
        None,
        "short",
        Some(now.plus(3600)),
    )
    .unwrap();
    assert_eq!(info.expires_at, Some(now.plus(3600)));
    let principal = access::authenticate_at(&mut c, &secret, now).unwrap();
    assert_eq!(principal.map(|p| p.token_id), Some(info.id.clone()));
    // One second before the expiry it works; at the expiry it is expired.
    assert!(access::authenticate_at(&mut c, &secret, now.plus(3599))
        .unwrap()
        .is_some());
    assert_eq!(
        access::authenticate_at(&mut c, &secret, now.plus(3600)).unwrap(),
        None
    );
    assert_eq!(
        access::authenticate_token_at(&mut c, &secret, now.plus(3600)).unwrap(),
        access::Authentication::Expired
    );
    // The same id with another secret says nothing about the token.
    let forged = format!("glt_{}_{}", info.id, "A".repeat(43));
    for at in [now, now.plus(3600)] {
        assert_eq!(
            access::authenticate_token_at(&mut c, &forged, at).unwrap(),
            access::Authentication::Unknown
        );
    }
    // Revoked (and expired too): revoked, to the holder only.
    access::revoke_token(&mut c, &info.id).unwrap();
    for at in [now, now.plus(3600)] {
        assert_eq!(
            access::authenticate_token_at(&mut c, &secret, at).unwrap(),
            access::Authentication::Revoked
        );
        assert_eq!(
            access::authenticate_token_at(&mut c, &forged, at).unwrap(),
            access::Authentication::Unknown
        );
    }
    for junk in [
        "",
        "glt_",
        "glt_0123456789ab_x",
        "Bearer",
        "glt_zzzzzzzzzzzz_x",
    ] {
        assert_eq!(
            access::authenticate_token_at(&mut c, junk, now).unwrap(),
            access::Authentication::Unknown,
            "{junk:?}"
        );
    }
    // A token without expiry never expires.
    let (_, forever) = access::create_token(&mut c, access::ApiRole::Auditor, None, "").unwrap();
    assert!(
        access::authenticate_at(&mut c, &forever, now.plus(100 * 365 * 86_400))
            .unwrap()
            .is_some()
    );
    // An expiry in the past is refused.
    assert!(matches!(
        access::create_token_expiring(&mut c, access::ApiRole::Admin, None, "", Some(now)),
        Err(gpuledger::store::StoreError::Refused(_))
    ));
    // The listing shows the expiry.
    let listed = access::list_tokens(&mut c).unwrap();
    let short = listed.iter().find(|t| t.id == info.id).unwrap();
    assert_eq!(short.expires_at, Some(now.plus(3600)));
    assert!(!short.expired(now) && short.expired(now.plus(3600)));
});

both_backends!(expired_and_revoked_tokens_are_told_apart, |db: &TestDb| {
    let log = init(db);
    // From the command line: a duration, and an RFC 3339 time.
    let (code, secret, err) =
        token_cli(&db.url, &["create", "--role", "auditor", "--expires", "2s"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("expiring at"), "{err}");
    let soon = secret.trim().to_owned();
    let (code, later, err) = token_cli(
        &db.url,
        &[
            "create",
            "--role",
            "auditor",
            "--expires",
            "2099-01-01T00:00:00+00:00",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let later = later.trim().to_owned();
    for bad in ["0s", "3y", "yesterday", "2000-01-01T00:00:00Z"] {
        let (code, _, err) = token_cli(&db.url, &["create", "--role", "auditor", "--expires", bad]);
        assert_ne!(code, Some(0), "--expires {bad} accepted");
        assert!(!err.is_empty());
    }

    let srv = log.serve();
    let h = srv.http();
    // Over the API.
    let made = h.token(
        &log.admin,
        json!({"role": "auditor", "label": "api", "expires_at": Timestamp::now().plus(2).to_string()}),
    );
    assert!(made["info"]["expires_at"].is_string(), "{made}");
    let api_soon = made["token"].as_str().unwrap().to_owned();
    for (body, slug) in [
        (
            json!({"role": "auditor", "expires_at": "2000-01-01T00:00:00Z"}),
            "refused",
        ),
        (
            json!({"role": "auditor", "expires_at": "next week"}),
            "invalid_parameter",
        ),
    ] {
        h.post("/v1/tokens", Some(&log.admin), &body)
            .assert_problem(400, slug, &body.to_string());
    }
    assert_eq!(h.get("/v1/tenants", Some(&later)).status, 200);

    // Wait out the short ones.
    std::thread::sleep(Duration::from_secs(3));
    let unknown = h.get("/v1/tenants", Some("glt_0123456789ab_notatoken"));
    let unknown_problem = unknown.assert_problem(401, "unauthorized", "an unknown token");
    assert_eq!(unknown.www_authenticate.as_deref(), Some("Bearer"));
    for (what, t) in [("CLI", &soon), ("API", &api_soon)] {
        let r = h.get("/v1/tenants", Some(t));
        let p = r.assert_problem(401, "token_expired", what);
        assert!(p["detail"].as_str().unwrap().contains("expired"), "{p}");
        let challenge = r.www_authenticate.clone().unwrap_or_default();
        assert!(
            challenge.contains(r#"error="invalid_token""#) && challenge.contains("expired"),
            "{what}: {challenge}"
        );
        // Its id with a wrong secret is merely unknown: the id alone tells nothing.
        let id = t.split('_').nth(1).unwrap();
        let forged = h.get("/v1/tenants", Some(&format!("glt_{id}_{}", "A".repeat(43))));
        assert_eq!(
            forged.assert_problem(401, "unauthorized", "forged"),
            unknown_problem
        );
        assert_eq!(forged.www_authenticate.as_deref(), Some("Bearer"));
    }
    assert_eq!(h.get("/v1/tenants", Some(&later)).status, 200);

    // A revoked token: 401 token_revoked, to its holder only.
    let made = h.token(&log.admin, json!({"role": "auditor", "label": "to revoke"}));
    let revoked = made["token"].as_str().unwrap().to_owned();
    let id = made["info"]["id"].as_str().unwrap().to_owned();
    assert_eq!(h.get("/v1/tenants", Some(&revoked)).status, 200);
    assert_eq!(
        h.delete(&format!("/v1/tokens/{id}"), Some(&log.admin))
            .status
            / 100,
        2
    );
    let r = h.get("/v1/tenants", Some(&revoked));
    let p = r.assert_problem(401, "token_revoked", "revoked");
    assert!(p["detail"].as_str().unwrap().contains("revoked"), "{p}");
    let challenge = r.www_authenticate.clone().unwrap_or_default();
    assert!(
        challenge.contains(r#"error="invalid_token""#) && challenge.contains("revoked"),
        "{challenge}"
    );
    let forged = h.get("/v1/tenants", Some(&format!("glt_{id}_{}", "A".repeat(43))));
    assert_eq!(
        forged.assert_problem(401, "unauthorized", "forged revoked"),
        unknown_problem
    );

    // Listings show the expiry.
    let listed = h.get("/v1/tokens", Some(&log.admin)).ok_json(200);
    let expiries: Vec<_> = items(&listed)
        .iter()
        .filter_map(|t| t["expires_at"].as_str())
        .collect();
    assert_eq!(expiries.len(), 3, "{listed}");
    assert!(expiries.contains(&"2099-01-01T00:00:00Z"), "{listed}");
    let (code, out, err) = token_cli(&db.url, &["list"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.matches("(expired ").count(), 2, "{out}");
    assert_eq!(
        out.matches("(expires 2099-01-01T00:00:00Z)").count(),
        1,
        "{out}"
    );
});
