//! Tamper evidence: one byte changed in any stored column of any entry (and in the stored
//! tree hashes and checkpoints) makes verify-log fail and name the entry concerned.

mod common;

use common::*;
use diesel::prelude::*;
use gpuledger::core::merkle;
use gpuledger::core::record::Role;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::read::{self, EntryRow};
use gpuledger::store::schema::{checkpoints, entries, tree_hashes};
use gpuledger::store::verify::{verify_log, VerifyError};
use gpuledger::store::{DbConn, Ledger};
use rust_decimal::Decimal;

fn build(db: &TestDb) -> Ledger {
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    let m = signer(&ledger, "market-1", Role::Market);
    parties(&ledger, &["t0", "t1", "t2"]);
    let now = Timestamp::now();
    let mut batch: Vec<_> = (1..=12)
        .map(|s| {
            sample::usage(
                "node-1",
                &k,
                s,
                &format!("t{}", s % 3),
                // At most the 8 GPUs each tenant's sample lease covers.
                Decimal::from(1 + s % 8),
                slot(s),
            )
        })
        .collect();
    batch.push(sample::energy(
        "node-1",
        &k,
        13,
        None,
        Decimal::new(1234, 3),
        now,
    ));
    batch.push(sample::spot("market-1", &m, 1, Decimal::new(215, 2), now));
    ledger.append(batch).unwrap();
    ledger.checkpoint().unwrap();
    ledger
}

/// The index verify-log blames, or None when it passes.
fn blamed(conn: &mut DbConn) -> Option<u64> {
    match verify_log(conn, None, &mut |_, _| {}) {
        Ok(_) => None,
        Err(VerifyError::Bad(f)) => Some(f.first().index),
        Err(e) => panic!("verify-log failed without naming an entry: {e}"),
    }
}

fn flip(b: &mut [u8], at: usize) {
    let i = at % b.len();
    b[i] ^= 0x01;
}

fn flip_text(s: &str, at: usize) -> String {
    let mut b = s.as_bytes().to_vec();
    let i = at % b.len();
    // Keep it valid UTF-8 and printable: change one ASCII letter or digit.
    b[i] = if b[i] == b'a' {
        b'b'
    } else if b[i].is_ascii_alphanumeric() {
        b'a'
    } else {
        b'z'
    };
    String::from_utf8(b).unwrap()
}

/// Every column of an entry row, as `column.eq(value)` pairs (for an insert or an update).
macro_rules! columns {
    ($row:expr) => {
        (
            entries::idx.eq($row.idx),
            entries::kind.eq(&$row.kind),
            entries::signer.eq(&$row.signer),
            entries::seq.eq($row.seq),
            entries::tenant.eq(&$row.tenant),
            entries::received_at.eq($row.received_at),
            entries::content_hash.eq(&$row.content_hash),
            entries::leaf.eq(&$row.leaf),
            entries::leaf_hash.eq(&$row.leaf_hash),
            entries::stream.eq(&$row.stream),
            entries::start_at.eq($row.start_at),
            entries::end_at.eq($row.end_at),
        )
    };
}

/// `row` with `column` changed by one byte, character or bit (which one depends on `at`); `idx`
/// moves the row out of the log's range.
fn tampered(row: &EntryRow, column: &str, at: usize) -> EntryRow {
    let mut t = row.clone();
    let bit = 1 << (at % 8);
    let text = |s: &Option<String>| Some(s.as_deref().map_or("x".to_owned(), |s| flip_text(s, at)));
    match column {
        "idx" => t.idx += 1_000_000,
        "kind" => t.kind = flip_text(&t.kind, at),
        "signer" => t.signer = flip_text(&t.signer, at),
        "seq" => t.seq ^= bit,
        "tenant" => t.tenant = text(&t.tenant),
        "received_at" => t.received_at ^= bit,
        "content_hash" => flip(&mut t.content_hash, at),
        "leaf" => flip(&mut t.leaf, at),
        "leaf_hash" => flip(&mut t.leaf_hash, at),
        "stream" => t.stream = text(&t.stream),
        "start_at" => t.start_at = Some(t.start_at.unwrap_or(0) ^ bit),
        "end_at" => t.end_at = Some(t.end_at.unwrap_or(0) ^ bit),
        c => panic!("no column {c}"),
    }
    t
}

both_backends!(any_changed_byte_is_named, |db: &TestDb| {
    let ledger = build(db);
    let size = ledger.reads().head().unwrap().0;
    let mut conn = gpuledger::store::connect(&db.url).unwrap();
    assert_eq!(blamed(&mut conn), None);
    let rows = read::entries_range(&mut conn, 0, size).unwrap();
    let mut checked = 0;
    for idx in [0u64, 1, 2, size / 2, size - 2, size - 1] {
        let row = rows[idx as usize].clone();
        let key = entries::table.find(idx as i64);
        for column in [
            "idx",
            "kind",
            "signer",
            "seq",
            "tenant",
            "received_at",
            "content_hash",
            "leaf",
            "leaf_hash",
            "stream",
            "start_at",
            "end_at",
        ] {
            for at in [0usize, 7, 31, 200] {
                let changed = tampered(&row, column, at);
                let r = diesel::update(key)
                    .set(columns!(changed))
                    .execute(&mut conn);
                if let Err(e) = r {
                    // A change the database itself refuses (unique (signer, seq)) cannot be stored.
                    assert!(matches!(column, "seq" | "signer"), "{column}: {e}");
                    continue;
                }
                assert_eq!(
                    blamed(&mut conn),
                    Some(idx),
                    "column {column} of entry {idx}, byte {at}"
                );
                checked += 1;
                // Restore the row exactly.
                diesel::delete(
                    entries::table.filter(
                        entries::idx
                            .eq(row.idx)
                            .or(entries::idx.eq(row.idx + 1_000_000)),
                    ),
                )
                .execute(&mut conn)
                .unwrap();
                diesel::insert_into(entries::table)
                    .values(columns!(row))
                    .execute(&mut conn)
                    .unwrap();
                if column == "idx" {
                    break;
                }
            }
        }
    }
    assert!(checked > 200, "only {checked} tamper cases ran");
    assert_eq!(blamed(&mut conn), None, "restored log verifies again");

    // A stored tree hash: blamed on the entry that wrote it.
    for idx in [0u64, 5, size - 1] {
        let id = merkle::stored_hash_index(0, idx) as i64;
        let h: Vec<u8> = tree_hashes::table
            .find(id)
            .select(tree_hashes::hash)
            .first(&mut conn)
            .unwrap();
        let mut b = h.clone();
        flip(&mut b, 3);
        diesel::update(tree_hashes::table.find(id))
            .set(tree_hashes::hash.eq(b))
            .execute(&mut conn)
            .unwrap();
        assert_eq!(blamed(&mut conn), Some(idx));
        diesel::update(tree_hashes::table.find(id))
            .set(tree_hashes::hash.eq(h))
            .execute(&mut conn)
            .unwrap();
    }
    // A checkpoint's note: blamed on its last entry.
    let (cp_size, note): (i64, String) = checkpoints::table
        .select((checkpoints::size, checkpoints::note))
        .first(&mut conn)
        .unwrap();
    diesel::update(checkpoints::table.find(cp_size))
        .set(checkpoints::note.eq(flip_text(&note, 25)))
        .execute(&mut conn)
        .unwrap();
    assert_eq!(blamed(&mut conn), Some(cp_size as u64 - 1));
    diesel::update(checkpoints::table.find(cp_size))
        .set(checkpoints::note.eq(&note))
        .execute(&mut conn)
        .unwrap();
    assert_eq!(blamed(&mut conn), None);
});

// ---------------------------------------------------------------------------------------------
// Compact bundles (`gpuledger-bundle/v3`, docs/PROTOCOL.md §14): the service's bundle of a
// certificate, tampered line by line, refused by both verifiers with the same reason code.
// ---------------------------------------------------------------------------------------------

use gpuledger::core::bundle::{self, Format};
use gpuledger::core::certificate::{Certificate, CertificateCheck, Scope};
use gpuledger::core::checkpoint::LogSigner;
use gpuledger::core::invoice::Period;
use gpuledger::store::certificates::{self as store_certs, CertificateRequest};

/// A log in which acme's records, the context and other entries interleave, so the bundle's
/// multi-proof has nodes to give; and acme's certificate for the first two hours.
fn certified(ledger: &Ledger) -> Certificate {
    ensure_nodes_in(ledger, &WEST_EAST_NODES);
    let n1 = signer(ledger, "node-1", Role::Node);
    let n2 = signer_for(ledger, "node-2", Role::Node, &["node-2", "node-3"]);
    parties(ledger, &["acme", "globex"]);
    acme_globex_h100_leases(ledger);
    #[rustfmt::skip]
    let records = [
        ("node-1", &n1, 1, h100_usage("acme", "node-1", "west", Some("h100-acme"), "8", 0, 3600)),
        ("node-2", &n2, 1, h100_usage("globex", "node-2", "west", Some("h100-globex"), "1", 0, 60)),
        ("node-2", &n2, 2, h100_usage("acme", "node-3", "east", Some("h100-acme"), "0.5", 0, 600)),
        ("node-2", &n2, 3, h100_usage("globex", "node-2", "west", Some("h100-globex"), "1", 600, 660)),
        ("node-2", &n2, 4, h100_usage("globex", "node-2", "west", Some("h100-globex"), "1", 660, 720)),
        ("node-1", &n1, 2, h100_usage("acme", "node-1", "west", Some("l1"), "2", 3600, 7200)),
        ("node-1", &n1, 3, h100_usage("acme", "node-1", "west", Some("h100-acme"), "1", 7200, 7260)),
    ];
    for (s, k, seq, b) in records {
        assert_accepted(&ledger.append(vec![signed(s, k, seq, &b)]).unwrap());
    }
    ledger
        .issuance()
        .certificate(CertificateRequest {
            tenant: "acme".into(),
            period: Period {
                from: at(0),
                to: at(7200),
            },
            scope: Scope::default(),
        })
        .unwrap()
}

/// The bundle's lines (without LF) as the service writes them in `format`.
fn bundle_lines(ledger: &Ledger, cert: &Certificate, format: Format) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    ledger
        .reads()
        .run(|c| {
            store_certs::write_certificate_bundle_as(c, cert, format, &mut |mut l| {
                assert_eq!(l.pop(), Some(b'\n'));
                lines.push(l);
                Ok(())
            })
        })
        .unwrap();
    lines
}

/// Both verifiers' verdicts on a certificate and bundle: the reason code, or "PASS".
struct Verdicts {
    dir: tempfile::TempDir,
    cert: Certificate,
    key: String,
    python: bool,
}

impl Verdicts {
    fn new(cert: &Certificate) -> Verdicts {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("certificate.json"),
            cert.to_canonical_json(),
        )
        .unwrap();
        Verdicts {
            dir,
            cert: cert.clone(),
            key: LogSigner::new(gpuledger::sample::ORIGIN, log_key())
                .unwrap()
                .verifier_key(),
            python: python_verifier_ready(),
        }
    }

    fn rust(&self, lines: &[Vec<u8>]) -> String {
        let run = || {
            let (_, check) = bundle::verify_bundle(
                lines.iter().cloned().map(Ok),
                &self.key,
                |h, a| CertificateCheck::start(self.cert.clone(), h, a),
                &mut |_| {},
            )?;
            check.finish()
        };
        match run() {
            Ok(_) => "PASS".into(),
            Err(f) => f.reason.code().into(),
        }
    }

    fn python(&self, lines: &[Vec<u8>]) -> Option<String> {
        if !self.python {
            return None;
        }
        let path = self.dir.path().join("bundle.ndjson");
        let mut bytes = Vec::new();
        for l in lines {
            bytes.extend_from_slice(l);
            bytes.push(b'\n');
        }
        std::fs::write(&path, bytes).unwrap();
        let out = python_verifier()
            .args(["certificate", "--certificate"])
            .arg(self.dir.path().join("certificate.json"))
            .arg("--bundle")
            .arg(&path)
            .args(["--log-key", &self.key, "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        Some(match v["result"].as_str() {
            Some("PASS") => "PASS".into(),
            _ => v["reason"].as_str().unwrap().to_owned(),
        })
    }

    /// Both verifiers give `expected` (one of them, the same for both, when several are
    /// listed; any failure when none is); the case's name in the panic.
    fn expect(&self, case: &str, lines: &[Vec<u8>], expected: &[&str]) {
        let rust = self.rust(lines);
        assert!(
            expected.contains(&rust.as_str()) || (expected.is_empty() && rust != "PASS"),
            "{case}: gpuledger verify says {rust}, expected {expected:?}"
        );
        if let Some(py) = self.python(lines) {
            assert_eq!(py, rust, "{case}: the Python verifier disagrees");
        }
    }
}

fn json_of(line: &[u8]) -> serde_json::Value {
    serde_json::from_slice(line).unwrap()
}

fn positions(lines: &[Vec<u8>], ty: &str) -> Vec<usize> {
    (0..lines.len())
        .filter(|&i| json_of(&lines[i])["type"] == ty)
        .collect()
}

/// The end line, its counts recomputed from the lines.
fn fix_end(lines: &mut [Vec<u8>]) {
    let entries = positions(lines, "entry").len() as u64;
    let nodes: u64 = positions(lines, "nodes")
        .iter()
        .map(|&i| json_of(&lines[i])["hashes"].as_array().unwrap().len() as u64)
        .sum();
    let last = lines.len() - 1;
    lines[last] = bundle::end_line_v3(entries, nodes);
    lines[last].pop();
}

/// The multi-proof's nodes, one line of them.
fn nodes_of(lines: &[Vec<u8>]) -> Vec<String> {
    let at = positions(lines, "nodes");
    assert_eq!(at.len(), 1, "this bundle's multi-proof fits one line");
    json_of(&lines[at[0]])["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect()
}

fn with_nodes(lines: &[Vec<u8>], nodes: &[String]) -> Vec<Vec<u8>> {
    let at = positions(lines, "nodes")[0];
    let mut out = lines.to_vec();
    let hashes: Vec<merkle::Hash> = nodes
        .iter()
        .map(|h| merkle::decode_hash(h).unwrap())
        .collect();
    if hashes.is_empty() {
        out.remove(at);
    } else {
        out[at] = bundle::nodes_line(&hashes);
        out[at].pop();
    }
    out
}

/// An entry line with its leaf object changed by `f`, written canonically.
fn with_leaf(line: &[u8], f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let v = json_of(line);
    let mut leaf = v["leaf"].clone();
    f(&mut leaf);
    let leaf = gpuledger::core::canonical::to_vec(&leaf).unwrap();
    let mut l = bundle::entry_line_v3(v["index"].as_u64().unwrap(), &leaf);
    l.pop();
    l
}

both_backends!(
    compact_bundle_tampers_are_refused_by_both_verifiers,
    |db: &TestDb| {
        let ledger = open(db);
        let cert = certified(&ledger);
        let v = Verdicts::new(&cert);
        let v2 = bundle_lines(&ledger, &cert, Format::V2);
        let v3 = bundle_lines(&ledger, &cert, Format::V3);
        v.expect("the genuine v2 bundle", &v2, &["PASS"]);
        v.expect("the genuine v3 bundle", &v3, &["PASS"]);
        assert!(json_of(&v3[0])["format"] == "gpuledger-bundle/v3");
        let v3_bytes: usize = v3.iter().map(|l| l.len() + 1).sum();
        let v2_bytes: usize = v2.iter().map(|l| l.len() + 1).sum();
        assert!(v3_bytes < v2_bytes, "v3 {v3_bytes} bytes, v2 {v2_bytes}");

        // The multi-proof's nodes: each changed, removed, or one added.
        let nodes = nodes_of(&v3);
        assert!(
            nodes.len() >= 3,
            "the interleaved log needs nodes: {nodes:?}"
        );
        for k in 0..nodes.len() {
            let mut bad = nodes.clone();
            bad[k] = flip_text(&bad[k], 5);
            if merkle::decode_hash(&bad[k]).is_none() {
                bad[k] = merkle::encode_hash(&merkle::leaf_hash(b"another node"));
            }
            v.expect(
                &format!("node {k} changed"),
                &with_nodes(&v3, &bad),
                &["inclusion_proof"],
            );
            let mut fewer = nodes.clone();
            fewer.remove(k);
            let lines = with_nodes(&v3, &fewer);
            v.expect(&format!("node {k} removed"), &lines, &["truncated"]);
            let mut lines = lines;
            fix_end(&mut lines);
            v.expect(
                &format!("node {k} removed, count fixed"),
                &lines,
                &["inclusion_proof"],
            );
        }
        let mut more = nodes.clone();
        more.push(merkle::encode_hash(&merkle::leaf_hash(b"extra")));
        let mut lines = with_nodes(&v3, &more);
        v.expect("a node added", &lines, &["truncated"]);
        fix_end(&mut lines);
        v.expect("a node added, count fixed", &lines, &["inclusion_proof"]);
        v.expect(
            "the node line removed",
            &with_nodes(&v3, &[]),
            &["truncated"],
        );
        let mut lines = with_nodes(&v3, &[]);
        fix_end(&mut lines);
        v.expect(
            "the node line removed, count fixed",
            &lines,
            &["inclusion_proof"],
        );

        // The end line's counts.
        let end = v3.len() - 1;
        let counts = json_of(&v3[end]);
        let (e, n) = (
            counts["entries"].as_u64().unwrap(),
            counts["nodes"].as_u64().unwrap(),
        );
        for (case, entries, nodes) in [
            ("entries + 1", e + 1, n),
            ("entries − 1", e - 1, n),
            ("nodes + 1", e, n + 1),
            ("nodes − 1", e, n - 1),
        ] {
            let mut lines = v3.clone();
            lines[end] = bundle::end_line_v3(entries, nodes);
            lines[end].pop();
            v.expect(case, &lines, &["truncated"]);
        }
        let mut lines = v3.clone();
        lines.pop();
        v.expect("no end line", &lines, &["truncated"]);

        // Entries: each removed (counts fixed), each duplicated, each with its leaf's `prev`
        // changed, written non-canonically, or its index changed.
        let entries = positions(&v3, "entry");
        let records: Vec<usize> = entries
            .iter()
            .copied()
            .filter(|&i| json_of(&v3[i])["leaf"]["envelope"]["kind"] == "gpu_usage")
            .collect();
        assert!(records.len() >= 3);
        for &at in &entries {
            let mut lines = v3.clone();
            lines.remove(at);
            fix_end(&mut lines);
            // A record removed: the tree no longer adds up. A context entry removed: what needs it
            // fails first (a key, a tenant), or the tree.
            let removed: &[&str] = if records.contains(&at) {
                &["inclusion_proof"]
            } else {
                &[]
            };
            v.expect(&format!("line {at} removed"), &lines, removed);
            let mut lines = v3.clone();
            lines.insert(at, v3[at].clone());
            fix_end(&mut lines);
            v.expect(&format!("line {at} twice"), &lines, &["order"]);
            let lines: Vec<Vec<u8>> = v3
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    if i == at {
                        with_leaf(l, |leaf| {
                            leaf["prev"] = merkle::encode_hash(&merkle::leaf_hash(b"x")).into()
                        })
                    } else {
                        l.clone()
                    }
                })
                .collect();
            // Where the bundle holds the entry before, the hash chain breaks first.
            v.expect(
                &format!("line {at}'s prev"),
                &lines,
                &["leaf_invalid", "inclusion_proof"],
            );
            let mut lines = v3.clone();
            lines[at] = String::from_utf8(v3[at].clone())
                .unwrap()
                .replacen("\"leaf\":{", "\"leaf\": {", 1)
                .into_bytes();
            v.expect(&format!("line {at} not canonical"), &lines, &["malformed"]);
            let mut lines = v3.clone();
            lines[at] = with_leaf(&v3[at], |leaf| {
                leaf["index"] = (leaf["index"].as_u64().unwrap() + 1).into()
            });
            v.expect(
                &format!("line {at}'s leaf index"),
                &lines,
                &["leaf_invalid"],
            );
        }
        // A record's quantity changed: its signature no longer holds.
        let last_entry = *entries.last().unwrap();
        let mut lines = v3.clone();
        lines[last_entry] = with_leaf(&v3[last_entry], |leaf| {
            leaf["envelope"]["body"]["gpu_count"] = 7.into()
        });
        v.expect(
            "a record changed",
            &lines,
            &["entry_signature", "leaf_invalid"],
        );
        // An entry after the node lines; a v2 entry line in a v3 bundle; the header saying v2.
        let mut lines = v3.clone();
        let moved = lines.remove(last_entry);
        lines.insert(lines.len() - 1, moved);
        v.expect("an entry after the nodes", &lines, &["order"]);
        let mut lines = v3.clone();
        lines[last_entry] = v2[last_entry].clone();
        v.expect("a v2 entry line", &lines, &["malformed"]);
        let mut lines = v3.clone();
        lines[0] = String::from_utf8(v3[0].clone())
            .unwrap()
            .replace("gpuledger-bundle/v3", "gpuledger-bundle/v2")
            .into_bytes();
        v.expect("the header says v2", &lines, &["malformed"]);
    }
);

/// A raw HTTP/1.1 GET (so nothing decompresses behind the test's back): the head, lower-cased,
/// and the body with chunked transfer coding removed.
fn raw_get(base: &str, path: &str, headers: &[(&str, &str)]) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&all[..split]).to_lowercase();
    let mut body = all[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16)
                .unwrap();
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        body = out;
    }
    (head, body)
}

// The bundle endpoints: v3 by default, v2 on request, 400 for another format; gzip when the
// client accepts it, plain otherwise; every answer verifies.
both_backends!(bundles_are_served_as_v3_v2_and_gzip, |db: &TestDb| {
    use gpuledger::store::access::{self, ApiRole};
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let key_path = log_key_file(dir.path());
    let (cert, token) = {
        let ledger = open(db);
        let cert = certified(&ledger);
        let token = ledger
            .with_account_writer(|c| {
                access::create_tenant(c, "acme", "Acme")?;
                access::create_token(c, ApiRole::Tenant, Some("acme"), "test").map(|x| x.1)
            })
            .unwrap();
        (cert, token)
    };
    let (child, base) = spawn_serve(&db.url, &key_path, 0, &[]);
    let _server = Proc(child);
    let v = Verdicts::new(&cert);
    let auth = format!("Bearer {token}");
    let lines_of = |body: &[u8]| -> Vec<Vec<u8>> {
        body.strip_suffix(b"\n")
            .unwrap()
            .split(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    };
    let path = format!("/v1/certificates/{}/bundle", cert.id);
    for (query, format) in [
        ("", "v3"),
        ("?bundle_format=v3", "v3"),
        ("?bundle_format=v2", "v2"),
    ] {
        let (head, plain) = raw_get(
            &base,
            &format!("{path}{query}"),
            &[("Authorization", &auth)],
        );
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(!head.contains("content-encoding"), "{head}");
        let lines = lines_of(&plain);
        assert_eq!(
            json_of(&lines[0])["format"],
            format!("gpuledger-bundle/{format}")
        );
        v.expect(&format!("served {format}"), &lines, &["PASS"]);
        let (head, gz) = raw_get(
            &base,
            &format!("{path}{query}"),
            &[("Authorization", &auth), ("Accept-Encoding", "gzip")],
        );
        assert!(head.contains("content-encoding: gzip"), "{head}");
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, plain, "the gzip answer holds the same bundle");
    }
    let (head, body) = raw_get(
        &base,
        &format!("{path}?bundle_format=v4"),
        &[("Authorization", &auth)],
    );
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("bundle_format"));
});

/// A multi-proof longer than one node line (4,096 hashes): acme's records alternate with
/// globex's, so every gap is a node. The service's lines verify, and a node changed in the
/// second line is refused, by both verifiers.
#[test]
fn a_multiproof_over_several_node_lines() {
    let db = sqlite();
    let ledger = open(&db);
    ensure_nodes_in(&ledger, &WEST_EAST_NODES);
    let n1 = signer(&ledger, "node-1", Role::Node);
    let n2 = signer(&ledger, "node-2", Role::Node);
    parties(&ledger, &["acme", "globex"]);
    lease_with(
        &ledger,
        "h100-acme",
        "acme",
        gpuledger::core::rating::LeaseClass::OnDemand,
        &[("node-1", "H100", 8)],
    );
    lease_with(
        &ledger,
        "h100-globex",
        "globex",
        gpuledger::core::rating::LeaseClass::OnDemand,
        &[("node-2", "H100", 8)],
    );
    let n = 4_200u64;
    let mut batch = Vec::new();
    for i in 0..n {
        let s = i as i64 * 10;
        let acme = h100_usage("acme", "node-1", "west", Some("h100-acme"), "1", s, s + 10);
        let globex = h100_usage(
            "globex",
            "node-2",
            "west",
            Some("h100-globex"),
            "1",
            s,
            s + 10,
        );
        batch.push(signed("node-1", &n1, i + 1, &acme));
        batch.push(signed("node-2", &n2, i + 1, &globex));
    }
    for chunk in batch.chunks(5_000) {
        assert_accepted(&ledger.append(chunk.to_vec()).unwrap());
    }
    let cert = ledger
        .issuance()
        .certificate(CertificateRequest {
            tenant: "acme".into(),
            period: Period {
                from: at(0),
                to: at(n as i64 * 10),
            },
            scope: Scope::default(),
        })
        .unwrap();
    assert_eq!(cert.entries.count, n);
    let lines = bundle_lines(&ledger, &cert, Format::V3);
    let node_lines = positions(&lines, "nodes");
    assert_eq!(node_lines.len(), 2, "4,200 gaps: a full line and the rest");
    let first = json_of(&lines[node_lines[0]])["hashes"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(first, bundle::MAX_NODES_PER_LINE);
    let v = Verdicts::new(&cert);
    v.expect("several node lines", &lines, &["PASS"]);
    let mut bad = lines.clone();
    let at_line = node_lines[1];
    let mut hashes: Vec<merkle::Hash> = json_of(&lines[at_line])["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| merkle::decode_hash(h.as_str().unwrap()).unwrap())
        .collect();
    hashes[7].0[0] ^= 1;
    bad[at_line] = bundle::nodes_line(&hashes);
    bad[at_line].pop();
    v.expect(
        "a node of the second line changed",
        &bad,
        &["inclusion_proof"],
    );
}

// A ledger whose clock went back (a test clock, which the clock guard does not judge) stamps a
// record before the entry logged just before it: verify-log names it, and both bundle
// verifiers refuse a certificate over it, with the same reason.
both_backends!(
    a_log_whose_receive_times_decrease_is_named_by_every_verifier,
    |db: &TestDb| {
        let ledger = open_at(db, at(11_000));
        certified(&ledger);
        let n1 = gpuledger::sample::key("node-1");
        ledger.set_clock(Some(at(7_300)));
        let late = h100_usage(
            "acme",
            "node-1",
            "west",
            Some("h100-acme"),
            "1",
            7_260,
            7_290,
        );
        assert_accepted(
            &ledger
                .append(vec![signed("node-1", &n1, 4, &late)])
                .unwrap(),
        );
        // The period closes the policy's skew (300 s) after it ends.
        ledger.set_clock(Some(at(7_600)));
        let cert = ledger
            .issuance()
            .certificate(CertificateRequest {
                tenant: "acme".into(),
                period: Period {
                    from: at(0),
                    to: at(7_300),
                },
                scope: Scope::default(),
            })
            .unwrap();
        let back = ledger.reads().run(read::head).unwrap().0 - 2;
        let mut conn = gpuledger::store::connect(&db.url).unwrap();
        match verify_log(&mut conn, None, &mut |_, _| {}) {
            Err(VerifyError::Bad(f)) => {
                let first = f.first();
                assert_eq!(
                    (first.index, first.reason),
                    (back, "received_at_decreased"),
                    "{f}"
                );
            }
            other => panic!("verify-log: {other:?}"),
        }
        let v = Verdicts::new(&cert);
        for format in [Format::V2, Format::V3] {
            v.expect(
                &format!("{format:?}: a record received before the entry before it"),
                &bundle_lines(&ledger, &cert, format),
                &["received_at_decreased"],
            );
        }
    }
);
