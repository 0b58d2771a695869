//! C2SP tlog-tiles (docs/PROTOCOL.md §17) over real HTTP, on both backends: every hash tile
//! equals the RFC 6962 nodes recomputed here from the leaves by direct recursion; a client
//! that reads only `/checkpoint` and `/tile/...` verifies the checkpoint and proves inclusion
//! and consistency; caching headers; malformed paths; tiles past the checkpoint; who may read
//! entry bundles; HEAD answering as GET without the body; the public consistency proofs and
//! checkpoints; the per-client rate.

mod common;

use base64::prelude::{Engine, BASE64_STANDARD};
use common::*;
use gpuledger::core::checkpoint::verify_checkpoint;
use gpuledger::core::tiles::{self, TileKind, TilePath};
use gpuledger::sample;
use rust_decimal::Decimal;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::process::{Child, Command, Stdio};
use tlog_tiles::{Hash, HashReader, Tile, TileHashReader, TileReader};

/// An answer with the headers these tests look at.
struct Got {
    status: u16,
    content_type: String,
    cache_control: Option<String>,
    body: Vec<u8>,
}

impl Got {
    fn slug(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_default();
        v["type"]
            .as_str()
            .unwrap_or_default()
            .trim_start_matches("urn:gpuledger:problem:")
            .to_owned()
    }
}

fn get(h: &Http, path: &str, token: Option<&str>) -> Got {
    let url = format!("{}{path}", h.base);
    let mut req = h.agent.get(&url);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut r = req.call().unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header("content-type").unwrap_or_default();
    let cache_control = header("cache-control");
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_vec().unwrap();
    Got {
        status,
        content_type,
        cache_control,
        body,
    }
}

/// `HEAD path`: the status, the headers `GET` would give and no body.
struct Head {
    status: u16,
    content_type: String,
    cache_control: Option<String>,
    content_length: Option<usize>,
    body_len: usize,
}

fn head(h: &Http, path: &str, token: Option<&str>) -> Head {
    let mut req = h.agent.head(format!("{}{path}", h.base));
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut r = req.call().unwrap_or_else(|e| panic!("HEAD {path}: {e}"));
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (content_type, cache_control) = (header("content-type"), header("cache-control"));
    let content_length = header("content-length").map(|v| v.parse().unwrap());
    Head {
        status: r.status().as_u16(),
        content_type: content_type.unwrap_or_default(),
        cache_control,
        content_length,
        body_len: r.body_mut().read_to_vec().unwrap().len(),
    }
}

/// `HEAD path` answers as `GET path` does (status, type, cache, length), without the body.
fn assert_head_like_get(h: &Http, path: &str, token: Option<&str>) {
    let (g, hd) = (get(h, path, token), head(h, path, token));
    assert_eq!(
        (hd.status, &hd.content_type, &hd.cache_control),
        (g.status, &g.content_type, &g.cache_control),
        "HEAD {path}"
    );
    assert_eq!(hd.content_length, Some(g.body.len()), "HEAD {path}");
    assert_eq!(hd.body_len, 0, "HEAD {path} has no body");
}

// ---------------------------------------------------------------------------------------------
// RFC 6962 by hand: the reference the served tiles are compared with.
// ---------------------------------------------------------------------------------------------

fn leaf_hash(leaf: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update([0u8])
        .chain_update(leaf)
        .finalize()
        .into()
}

fn node_hash(l: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
    Sha256::new()
        .chain_update([1u8])
        .chain_update(l)
        .chain_update(r)
        .finalize()
        .into()
}

/// MTH(D) of RFC 6962 §2.1 over leaf hashes, by its recursive definition.
fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
    match leaves.len() {
        0 => Sha256::digest(b"").into(),
        1 => leaves[0],
        n => {
            let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
    }
}

/// The bytes tile `(level, n, width)` must hold: `MTH(D[(n·256 + i)·256^L : (n·256 + i + 1)·256^L])`
/// for `i` below the width (C2SP tlog-tiles, "Merkle Tree").
fn expected_tile(leaves: &[[u8; 32]], level: u8, n: u64, width: u32) -> Vec<u8> {
    let span = 256usize.pow(u32::from(level));
    (0..width as usize)
        .flat_map(|i| {
            let start = (n as usize * 256 + i) * span;
            mth(&leaves[start..start + span])
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A monitor that reads only /checkpoint and /tile/...
// ---------------------------------------------------------------------------------------------

/// Tiles over HTTP, for `tlog_tiles::TileHashReader` (which checks them against the
/// checkpoint's root before it hands out any hash). Records the paths it fetched; with
/// `tamper`, flips one bit of that tile.
struct HttpTiles<'a> {
    http: &'a Http,
    fetched: RefCell<Vec<String>>,
    tamper: Option<String>,
}

impl<'a> HttpTiles<'a> {
    fn new(http: &'a Http) -> Self {
        HttpTiles {
            http,
            fetched: RefCell::new(Vec::new()),
            tamper: None,
        }
    }
}

impl TileReader for HttpTiles<'_> {
    fn height(&self) -> u8 {
        tiles::TILE_HEIGHT
    }

    fn read_tiles(&self, wanted: &[Tile]) -> Result<Vec<Vec<u8>>, tlog_tiles::Error> {
        wanted
            .iter()
            .map(|t| {
                let path = TilePath::from_tlog(t)
                    .ok_or(tlog_tiles::Error::InvalidTile)?
                    .path();
                let r = get(self.http, &format!("/{path}"), None);
                if r.status != 200 {
                    return Err(tlog_tiles::Error::InvalidInput(format!(
                        "{path}: {}",
                        r.status
                    )));
                }
                self.fetched.borrow_mut().push(path.clone());
                let mut body = r.body;
                if self.tamper.as_deref() == Some(path.as_str()) {
                    body[0] ^= 1;
                }
                Ok(body)
            })
            .collect()
    }

    fn save_tiles(&self, _: &[Tile], _: &[Vec<u8>]) {}
}

/// The latest checkpoint as the monitor reads it: `/checkpoint`, verified with the log key.
fn read_checkpoint(h: &Http, verifier_key: &str) -> (u64, Hash, String) {
    let r = get(h, "/checkpoint", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type, "text/plain; charset=utf-8");
    let note = String::from_utf8(r.body).unwrap();
    let cp = verify_checkpoint(note.as_bytes(), verifier_key)
        .unwrap_or_else(|e| panic!("/checkpoint does not verify: {e}\n{note}"));
    (cp.size(), *cp.hash(), note)
}

/// Posts `n` usage records of tenant `t1` from node-1 (seqs `first..first + n`), in batches.
fn post_usage(h: &Http, key: &ed25519_dalek::SigningKey, first: u64, n: u64) {
    let seqs: Vec<u64> = (first..first + n).collect();
    for chunk in seqs.chunks(500) {
        let batch: Vec<_> = chunk
            .iter()
            .map(|&s| sample::usage("node-1", key, s, "t1", Decimal::ONE, slot(s)))
            .collect();
        let out = h.post_records(&batch);
        let accepted = items(&out["outcomes"])
            .iter()
            .filter(|r| r["status"] == "accepted")
            .count();
        assert_eq!(accepted, chunk.len(), "{out}");
    }
}

/// Which deterministic "random" entries to prove: a hash of the counter, reduced.
fn pick(i: u64, size: u64) -> u64 {
    let d = Sha256::digest(format!("tiles test pick {i}").as_bytes());
    u64::from_be_bytes(d[..8].try_into().unwrap()) % size
}

both_backends!(tiles_are_the_tree_and_prove_it, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let key = sample::key("tiles-node");
    h.register(&admin, "node-1", "node", &key);
    h.parties(&admin, &["t1"]);
    let verifier_key = h.get("/v1/log", None).ok_json(200)["verifier_key"]
        .as_str()
        .unwrap()
        .to_owned();

    // A first checkpoint a little past one full tile, then the rest: 7 full level-0 tiles, a
    // partial one, and a level-1 tile of width 7.
    post_usage(&h, &key, 1, 300);
    let old_size = h.size();
    h.checkpoint_at(old_size, &verifier_key);
    let (s1, r1, _) = read_checkpoint(&h, &verifier_key);
    assert_eq!(s1, old_size);
    post_usage(&h, &key, 301, 1_700);
    let size = h.size();
    h.checkpoint_at(size, &verifier_key);
    let (s2, r2, note) = read_checkpoint(&h, &verifier_key);
    assert_eq!(s2, size);
    assert!(size >= 7 * 256 && !size.is_multiple_of(256), "size {size}");
    let all = tiles::tiles_of_tree(size);
    let full0 = all.iter().filter(|t| t.level() == 0 && t.is_full()).count();
    assert_eq!(full0 as u64, size / 256);
    assert!(all.contains(&TilePath::hashes(1, 0, (size / 256) as u32).unwrap()));

    // The leaves, read by the admin, and the tree recomputed from them by hand.
    let entries = h.all_entries(&admin);
    assert_eq!(entries.len() as u64, size);
    let leaves: Vec<Vec<u8>> = entries
        .iter()
        .map(|e| BASE64_STANDARD.decode(e["leaf"].as_str().unwrap()).unwrap())
        .collect();
    let hashes: Vec<[u8; 32]> = leaves.iter().map(|l| leaf_hash(l)).collect();
    assert_eq!(
        mth(&hashes),
        r2.0,
        "the checkpoint's root is MTH of the leaves"
    );
    assert_eq!(mth(&hashes[..s1 as usize]), r1.0);

    // Every tile of both checkpoints, full and partial, at every level.
    let mut tiles_checked = 0;
    for t in tiles::tiles_of_tree(s1).into_iter().chain(all.clone()) {
        let TileKind::Hashes { level } = t.kind() else {
            unreachable!()
        };
        let r = get(&h, &format!("/{}", t.path()), None);
        assert_eq!(r.status, 200, "{}", t.path());
        assert_eq!(r.content_type, "application/octet-stream");
        assert_eq!(
            r.body,
            expected_tile(&hashes, level, t.index(), t.width()),
            "{} differs from the tree",
            t.path()
        );
        let cache = r.cache_control.unwrap_or_default();
        if t.is_full() {
            assert_eq!(cache, "public, max-age=31536000, immutable", "{}", t.path());
        } else {
            assert_eq!(cache, "public, max-age=60", "{}", t.path());
        }
        tiles_checked += 1;
    }
    assert!(tiles_checked >= 10, "{tiles_checked}");
    // A partial tile narrower than the latest one is served too (any width the checkpoint
    // covers), with the same hashes.
    let narrow = get(&h, "/tile/0/001.p/3", None);
    assert_eq!(narrow.body, expected_tile(&hashes, 0, 1, 3));

    // The checkpoint at the root: the same note, a short cache.
    let r = get(&h, "/checkpoint", None);
    assert_eq!(String::from_utf8(r.body).unwrap(), note);
    assert_eq!(r.cache_control.as_deref(), Some("public, max-age=2"));

    // HEAD, for caches and monitors: what GET answers, without the body, on the checkpoints,
    // full and partial tiles, and the refusals.
    let h_cp = head(&h, "/checkpoint", None);
    assert_eq!(
        (h_cp.status, h_cp.content_length, h_cp.body_len),
        (200, Some(note.len()), 0)
    );
    for path in [
        "/checkpoint".to_owned(),
        "/v1/checkpoint".to_owned(),
        "/tile/0/000".to_owned(),
        "/tile/0/001.p/3".to_owned(),
        format!("/tile/0/{:03}.p/{}", size / 256, size % 256),
        format!("/tile/1/000.p/{}", size / 256),
        "/tile/0/0".to_owned(),
        "/tile/".to_owned(),
        format!("/tile/0/{:03}", size / 256),
    ] {
        assert_head_like_get(&h, &path, None);
    }
    assert_eq!(head(&h, "/tile/0/000", None).content_length, Some(256 * 32));
    assert_eq!(head(&h, "/tile/0/0", None).status, 400);
    assert_eq!(
        head(&h, &format!("/tile/0/{:03}", size / 256), None).status,
        404
    );

    // The monitor: only /checkpoint and /tile/..., every hash checked against the root.
    let reader = HttpTiles::new(&h);
    let tree = TileHashReader::new(s2, r2, &reader);
    let mut chosen: Vec<u64> = (0..24).map(|i| pick(i, size)).collect();
    chosen.extend([0, 255, 256, size - 1]);
    for &i in &chosen {
        let proof = tlog_tiles::prove_record(s2, i, &tree)
            .unwrap_or_else(|e| panic!("inclusion proof of {i} from tiles: {e}"));
        tlog_tiles::check_record(&proof, s2, r2, i, Hash(leaf_hash(&leaves[i as usize])))
            .unwrap_or_else(|e| panic!("entry {i}: {e}"));
        // And not another entry's leaf.
        let other = (i + 1) % size;
        assert!(tlog_tiles::check_record(
            &proof,
            s2,
            r2,
            i,
            Hash(leaf_hash(&leaves[other as usize]))
        )
        .is_err());
    }
    let consistency = tlog_tiles::prove_tree(s2, s1, &tree).expect("consistency from tiles");
    tlog_tiles::check_tree(&consistency, s2, r2, s1, r1).expect("the two checkpoints agree");
    assert!(tlog_tiles::check_tree(&consistency, s2, r2, s1, r2).is_err());
    let fetched = reader.fetched.borrow().clone();
    assert!(
        fetched.iter().all(|p| p.starts_with("tile/")),
        "{fetched:?}"
    );
    // The same proofs as the server gives.
    let served = h
        .get(&format!("/v1/proofs/consistency?from={s1}&to={s2}"), None)
        .ok_json(200);
    let served: Vec<String> = serde_json::from_value(served["hashes"].clone()).unwrap();
    let ours: Vec<String> = consistency
        .iter()
        .map(|x| BASE64_STANDARD.encode(x.0))
        .collect();
    assert_eq!(served, ours);
    // A tile changed in transit is caught against the root.
    let mut bad = HttpTiles::new(&h);
    bad.tamper = Some(format!("tile/0/{:03}.p/{}", size / 256, size % 256));
    let bad_tree = TileHashReader::new(s2, r2, &bad);
    assert!(matches!(
        bad_tree.read_hashes(&[tlog_tiles::stored_hash_index(0, size - 1)]),
        Err(tlog_tiles::Error::InconsistentTile)
    ));

    // Malformed paths: 400 malformed_tile_path.
    for path in [
        "/tile/00/000",
        "/tile/01/000",
        "/tile/64/000",
        "/tile/0/0",
        "/tile/0/0000",
        "/tile/0/x000/001",
        "/tile/0/000.p/0",
        "/tile/0/000.p/256",
        "/tile/0/000.p/01",
        "/tile/0/000/",
        "/tile/8/0/000",
        "/tile/a/000",
        "/tile/0/%30%30%30",
        "/tile/0",
        "/tile/",
        "/tile/entries",
    ] {
        let r = get(&h, path, None);
        assert_eq!(
            (r.status, r.slug().as_str()),
            (400, "malformed_tile_path"),
            "{path}"
        );
        assert!(r.content_type.starts_with("application/problem+json"));
    }
    let r = get(&h, "/tile/entries/01", Some(&admin));
    assert_eq!((r.status, r.slug().as_str()), (400, "malformed_tile_path"));

    // Past the checkpoint: 404.
    let last = size / 256;
    for path in [
        format!("/tile/0/{last:03}"),
        format!("/tile/0/{last:03}.p/{}", size % 256 + 1),
        format!("/tile/0/{:03}.p/1", last + 1),
        "/tile/1/000".to_owned(),
        format!("/tile/1/000.p/{}", last + 1),
        "/tile/2/000.p/1".to_owned(),
        "/tile/63/000.p/1".to_owned(),
        "/tile/0/x018/x446/x744/x073/x709/x551/615".to_owned(),
    ] {
        let r = get(&h, &path, None);
        assert_eq!((r.status, r.slug().as_str()), (404, "not_found"), "{path}");
    }

    // Entry bundles: not for anonymous callers nor tenants; auditors get leaves that hash to
    // the level-0 tile.
    let auditor = h.secret(&admin, json!({"role": "auditor"}));
    let tenant = h.secret(&admin, json!({"role": "tenant", "tenant": "t1"}));
    let first = "/tile/entries/000";
    assert_eq!(get(&h, first, None).status, 401);
    assert_eq!(get(&h, first, Some("glt_nope_nope")).status, 401);
    let r = get(&h, first, Some(&tenant));
    assert_eq!((r.status, r.slug().as_str()), (403, "forbidden"));
    let bundles: Vec<TilePath> = (0..last)
        .map(|n| TilePath::entries(n, 256).unwrap())
        .chain(TilePath::entries(last, (size % 256) as u32))
        .collect();
    for b in &bundles {
        let r = get(&h, &format!("/{}", b.path()), Some(&auditor));
        assert_eq!(r.status, 200, "{}", b.path());
        assert_eq!(r.content_type, "application/octet-stream");
        let want_cache = if b.is_full() {
            "private, max-age=31536000, immutable"
        } else {
            "private, max-age=60"
        };
        assert_eq!(r.cache_control.as_deref(), Some(want_cache));
        let got = tiles::decode_bundle(&r.body).unwrap();
        assert_eq!(got.len() as u32, b.width());
        let level0 = get(
            &h,
            &format!("/tile/0/{}", &b.path()["tile/entries/".len()..]),
            None,
        );
        let rehashed: Vec<u8> = got.iter().flat_map(|l| leaf_hash(l)).collect();
        assert_eq!(rehashed, level0.body, "{}", b.path());
        let start = b.start().unwrap() as usize;
        for (i, l) in got.iter().enumerate() {
            assert_eq!(*l, leaves[start + i].as_slice());
        }
    }
    assert_eq!(
        get(&h, &format!("/tile/entries/{last:03}"), Some(&auditor)).status,
        404
    );
    // HEAD on entry bundles: the same access rules, the same headers.
    assert_eq!(head(&h, first, None).status, 401);
    assert_eq!(head(&h, first, Some(&tenant)).status, 403);
    for path in [
        first.to_owned(),
        format!("/{}", bundles[last as usize].path()),
    ] {
        assert_head_like_get(&h, &path, Some(&auditor));
    }
    // Compressed for a client that accepts gzip, the same bytes once inflated.
    let plain = get(&h, first, Some(&auditor)).body;
    let mut r = h
        .agent
        .get(&format!("{}{first}", h.base))
        .header("Authorization", &format!("Bearer {auditor}"))
        .header("Accept-Encoding", "gzip")
        .call()
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let gz = r.body_mut().read_to_vec().unwrap();
    assert!(
        gz.len() < plain.len() / 2,
        "{} of {}",
        gz.len(),
        plain.len()
    );
    let mut inflated = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut inflated).unwrap();
    assert_eq!(inflated, plain);

    // Consistency proofs and checkpoints need no token; inclusion proofs still do.
    h.get(&format!("/v1/proofs/consistency?from=1&to={size}"), None)
        .ok_json(200);
    let page = h.get("/v1/checkpoints?limit=2", None).ok_json(200);
    assert_eq!(page["checkpoints"][0]["size"], size);
    h.get(&format!("/v1/proofs/inclusion?index=0&size={size}"), None)
        .assert_problem(401, "unauthorized", "inclusion without a token");
});

/// Spawns `gpuledger serve` on `log` with extra arguments; returns the child and its base URL.
struct Serving(Child, String);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve_with(log: &Log, args: &[&str]) -> Serving {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &log.db.url,
        ])
        .arg("--log-key")
        .arg(log.key_path())
        .args(args)
        .env_remove("GPULEDGER_DATABASE_URL")
        .env_remove("GPULEDGER_CONFIG")
        .env("GPULEDGER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = common::listening(&mut child, "serve");
    Serving(child, base)
}

// The tiles and the root checkpoint count against the per-client rate like /v1 does.
both_backends!(tiles_are_rate_limited_per_client, |db: &TestDb| {
    let log = init(db);
    let s = serve_with(
        &log,
        &["--client-rate-per-second", "1", "--client-rate-burst", "3"],
    );
    let h = Http::new(&s.1);
    // The burst of 3 passes; of the next requests, made far faster than one a second, the
    // rate refuses some of each kind (at most one a second is let through).
    let paths = ["/checkpoint", "/tile/0/000.p/1"];
    let answers: Vec<(&str, u16)> = (0..11)
        .map(|i| (paths[i % 2], get(&h, paths[i % 2], None).status))
        .collect();
    assert!(answers[..3].iter().all(|a| a.1 == 200), "{answers:?}");
    for p in paths {
        assert!(
            answers[3..].contains(&(p, 429)),
            "{p} never refused: {answers:?}"
        );
    }
});

/// The worked example of docs/PROTOCOL.md §17: the tiles a monitor reads to prove entry
/// 12,345 in a tree of 70,000 entries, and the consistency of 70,000 with 65,000, computed
/// with an in-memory tree (no server).
#[test]
fn worked_example_of_the_protocol() {
    let size = 70_000u64;
    let mut stored = gpuledger::core::merkle::MemoryHashes::default();
    for i in 0..size {
        let leaf = format!("entry {i}");
        let new = tlog_tiles::stored_hashes(i, leaf.as_bytes(), &stored).unwrap();
        let base = tlog_tiles::stored_hash_index(0, i);
        for (k, x) in new.into_iter().enumerate() {
            stored.0.insert(base + k as u64, x);
        }
    }
    let root = tlog_tiles::tree_hash(size, &stored).unwrap();

    struct Memory<'a>(
        &'a gpuledger::core::merkle::MemoryHashes,
        RefCell<Vec<String>>,
    );
    impl TileReader for Memory<'_> {
        fn height(&self) -> u8 {
            8
        }
        fn read_tiles(&self, wanted: &[Tile]) -> Result<Vec<Vec<u8>>, tlog_tiles::Error> {
            let mut out = Vec::new();
            for t in wanted {
                self.1
                    .borrow_mut()
                    .push(TilePath::from_tlog(t).unwrap().path());
                out.push(t.read_data(self.0)?);
            }
            Ok(out)
        }
        fn save_tiles(&self, _: &[Tile], _: &[Vec<u8>]) {}
    }

    let tiles = tiles::tiles_of_tree(size);
    let partial: Vec<String> = tiles
        .iter()
        .filter(|t| !t.is_full() || t.level() > 0)
        .map(TilePath::path)
        .collect();
    assert_eq!(tiles.len(), 277);
    assert_eq!(
        partial,
        [
            "tile/0/273.p/112",
            "tile/1/000",
            "tile/1/001.p/17",
            "tile/2/000.p/1"
        ]
    );

    let m = Memory(&stored, RefCell::new(Vec::new()));
    let tree = TileHashReader::new(size, root, &m);
    let proof = tlog_tiles::prove_record(size, 12_345, &tree).unwrap();
    let leaf = tlog_tiles::record_hash(b"entry 12345");
    tlog_tiles::check_record(&proof, size, root, 12_345, leaf).unwrap();
    assert_eq!(proof.len(), 17);
    let inclusion_tiles = m.1.take();
    assert_eq!(
        inclusion_tiles,
        [
            "tile/2/000.p/1",
            "tile/1/001.p/17",
            "tile/0/273.p/112",
            "tile/1/000",
            "tile/0/048"
        ],
        "{inclusion_tiles:?}"
    );
    let old = 65_000u64;
    let old_root = tlog_tiles::tree_hash(old, &stored).unwrap();
    let proof = tlog_tiles::prove_tree(size, old, &tree).unwrap();
    tlog_tiles::check_tree(&proof, size, root, old, old_root).unwrap();
    assert_eq!(proof.len(), 15);
    let consistency_tiles = m.1.take();
    assert_eq!(
        consistency_tiles,
        [
            "tile/2/000.p/1",
            "tile/1/001.p/17",
            "tile/0/273.p/112",
            "tile/1/000",
            "tile/0/253"
        ],
        "{consistency_tiles:?}"
    );
}
