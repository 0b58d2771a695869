//! Byte-exact vectors for witness cosignatures (C2SP tlog-cosignature `cosignature/v1`,
//! Ed25519) and the tlog-witness `add-checkpoint` body, in tests/vectors/cosignature/.
//!
//! `committed_vectors_match_the_code` rebuilds every file from fixed keys with
//! `gpuledger::core::cosignature` and compares it with the committed file (with
//! `GPULEDGER_REGENERATE_VECTORS=1` it rewrites them). The other tests check the committed files
//! by the spec's definitions written out by hand: the key id with SHA-256 directly, the signed
//! message assembled line by line, the signature line decoded field by field and verified with
//! ed25519-dalek's `verify_strict`, the consistency proof with tlog's `check_tree`. The spec's
//! own example lines are decoded too.

use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signature, SigningKey, VerifyingKey};
use gpuledger::core::checkpoint::{self, LogSigner};
use gpuledger::core::cosignature::{
    self, AddCheckpoint, CosignatureError, Cosigner, WitnessKey, COSIGNATURE_V1_ALG,
};
use gpuledger::core::merkle::{self, Hash, MemoryHashes};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/cosignature");
const REGENERATE: &str = "GPULEDGER_REGENERATE_VECTORS";

/// The witness: a seed of 32 bytes 0x04 and its name.
const WITNESS_SEED: [u8; 32] = [0x04; 32];
const WITNESS_NAME: &str = "witness.gpuledger.example/w1";
/// The log: a seed of 32 bytes 0x03 (the vector log key) under its own origin.
const LOG_SEED: [u8; 32] = [0x03; 32];
const ORIGIN: &str = "gpuledger.example/cosignature-vectors";
/// Leaves of the vector tree: `cosignature vector leaf <i>` for i in 0..11.
const OLD_SIZE: u64 = 6;
const SIZE: u64 = 11;
/// The cosignature time: 2026-12-01T12:00:00Z.
const TIMESTAMP: u64 = 1_796_126_400;

fn tree() -> MemoryHashes {
    let mut hashes = MemoryHashes::default();
    let leaves: Vec<Hash> = (0..SIZE)
        .map(|i| merkle::leaf_hash(format!("cosignature vector leaf {i}").as_bytes()))
        .collect();
    merkle::append_leaves(0, &leaves, &mut hashes).unwrap();
    hashes
}

fn log() -> LogSigner {
    LogSigner::new(ORIGIN, SigningKey::from_bytes(&LOG_SEED)).unwrap()
}

fn cosigner() -> Cosigner {
    Cosigner::new(WITNESS_NAME, SigningKey::from_bytes(&WITNESS_SEED)).unwrap()
}

fn line(s: &str) -> Vec<u8> {
    format!("{s}\n").into_bytes()
}

fn build() -> BTreeMap<String, Vec<u8>> {
    let hashes = tree();
    let log = log();
    let old_root = merkle::tree_hash(OLD_SIZE, &hashes).unwrap();
    let root = merkle::tree_hash(SIZE, &hashes).unwrap();
    let old_note = log.sign_checkpoint(OLD_SIZE, &old_root);
    let note = log.sign_checkpoint(SIZE, &root);
    let proof = merkle::prove_tree(SIZE, OLD_SIZE, &hashes).unwrap();
    let c = cosigner();
    let w = c.witness_key();
    let body = cosignature::note_body(note.as_bytes()).unwrap();
    let message = cosignature::signed_message(&body, TIMESTAMP);
    let sig_line = c.cosign(&body, TIMESTAMP);
    let sig_b64 = sig_line
        .strip_suffix('\n')
        .unwrap()
        .rsplit_once(' ')
        .unwrap()
        .1
        .to_owned();
    let cosigned =
        cosignature::with_signature_lines(&note, std::slice::from_ref(&sig_line)).unwrap();
    let request = AddCheckpoint {
        old_size: OLD_SIZE,
        proof,
        checkpoint: note.clone().into_bytes(),
    };

    let mut files = BTreeMap::new();
    let mut witness = serde_json::to_vec_pretty(&json!({
        "name": WITNESS_NAME,
        "seed_hex": hex::encode(WITNESS_SEED),
        "public_key": BASE64_STANDARD.encode(w.public_key().as_bytes()),
        "key_id": format!("{:08x}", w.key_id()),
        "vkey": w.vkey(),
    }))
    .unwrap();
    witness.push(b'\n');
    files.insert("witness.json".into(), witness);
    files.insert("witness.vkey".into(), line(&w.vkey()));
    files.insert("log.vkey".into(), line(&log.verifier_key()));
    files.insert("old_checkpoint.note".into(), old_note.into_bytes());
    files.insert("checkpoint.note".into(), note.into_bytes());
    files.insert("timestamp.txt".into(), line(&TIMESTAMP.to_string()));
    files.insert("signed_message.hex".into(), line(&hex::encode(&message)));
    files.insert("signed_message.bin".into(), message);
    files.insert("signature.b64".into(), line(&sig_b64));
    files.insert("signature_line.txt".into(), sig_line.into_bytes());
    files.insert("cosigned.note".into(), cosigned.into_bytes());
    files.insert("add_checkpoint.body".into(), request.to_body());
    files
}

fn read(name: &str) -> Vec<u8> {
    let p = Path::new(DIR).join(name);
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; generate with {REGENERATE}=1 cargo test --test cosignature_vectors",
            p.display()
        )
    })
}

fn read_text(name: &str) -> String {
    String::from_utf8(read(name)).unwrap()
}

/// A one-line text file, without its final newline.
fn read_line(name: &str) -> String {
    let s = read_text(name);
    let body = s
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{name} must end with one newline"));
    assert!(!body.contains('\n'), "{name} must be one line");
    body.to_owned()
}

#[test]
fn committed_vectors_match_the_code() {
    let files = build();
    let dir = PathBuf::from(DIR);
    if std::env::var(REGENERATE).as_deref() == Ok("1") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        return;
    }
    let mut problems = Vec::new();
    for (name, bytes) in &files {
        match std::fs::read(dir.join(name)) {
            Ok(committed) if &committed == bytes => {}
            Ok(_) => problems.push(format!("{name}: differs from what the code produces now")),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "README.md" && !files.contains_key(&name) {
            problems.push(format!("{name}: not produced by the generator (stale?)"));
        }
    }
    assert!(
        problems.is_empty(),
        "the cosignature vectors changed:\n  {}",
        problems.join("\n  ")
    );
    let readme = read_text("README.md");
    for name in files.keys() {
        assert!(
            readme.contains(&format!("`{name}`")),
            "README.md does not describe {name}"
        );
    }
}

#[test]
fn key_id_and_vkey_by_hand() {
    let w: Value = serde_json::from_slice(&read("witness.json")).unwrap();
    let seed = hex::decode(w["seed_hex"].as_str().unwrap()).unwrap();
    let key = SigningKey::from_bytes(&seed.try_into().unwrap()).verifying_key();
    assert_eq!(
        w["public_key"].as_str().unwrap(),
        BASE64_STANDARD.encode(key.as_bytes())
    );
    // SHA-256(name ‖ "\n" ‖ 0x04 ‖ key)[:4], computed directly.
    let mut h = Sha256::new();
    h.update(WITNESS_NAME.as_bytes());
    h.update(b"\n");
    h.update([0x04]);
    h.update(key.as_bytes());
    let id = hex::encode(&h.finalize()[..4]);
    assert_eq!(w["key_id"].as_str().unwrap(), id);
    // The vkey: name + 8 hex digits + base64(0x04 ‖ key).
    let mut material = vec![0x04u8];
    material.extend_from_slice(key.as_bytes());
    let vkey = format!("{WITNESS_NAME}+{id}+{}", BASE64_STANDARD.encode(&material));
    assert_eq!(w["vkey"].as_str().unwrap(), vkey);
    assert_eq!(read_line("witness.vkey"), vkey);
    let parsed = WitnessKey::parse(&vkey).unwrap();
    assert_eq!(format!("{:08x}", parsed.key_id()), id);
    assert_eq!(parsed.public_key(), &key);
    assert_eq!(COSIGNATURE_V1_ALG, 0x04);
    // The same key as a log (type 0x01) key has another key id: the two are never confused.
    assert_ne!(
        checkpoint::note_key_id(WITNESS_NAME, &key),
        parsed.key_id(),
        "type byte is part of the key id"
    );
}

#[test]
fn signed_message_by_hand() {
    let note = read_text("checkpoint.note");
    let cp = checkpoint::verify_checkpoint(note.as_bytes(), &read_line("log.vkey")).unwrap();
    assert_eq!(cp.size(), SIZE);
    let root = merkle::tree_hash(SIZE, &tree()).unwrap();
    assert_eq!(*cp.hash(), root);
    let timestamp = read_line("timestamp.txt");
    assert_eq!(timestamp, TIMESTAMP.to_string());
    let by_hand = format!(
        "cosignature/v1\ntime {timestamp}\n{ORIGIN}\n{SIZE}\n{}\n",
        BASE64_STANDARD.encode(root.0)
    );
    assert_eq!(read("signed_message.bin"), by_hand.as_bytes());
    assert_eq!(
        read_line("signed_message.hex"),
        hex::encode(by_hand.as_bytes())
    );
    // The note body is everything before the blank line, final LF included.
    assert!(note.starts_with(&by_hand["cosignature/v1\ntime 1796126400\n".len()..]));
}

#[test]
fn signature_line_decoded_and_verified_by_hand() {
    let w: Value = serde_json::from_slice(&read("witness.json")).unwrap();
    let key = VerifyingKey::from_bytes(
        &BASE64_STANDARD
            .decode(w["public_key"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap(),
    )
    .unwrap();
    let b64 = read_line("signature.b64");
    let raw = BASE64_STANDARD.decode(&b64).unwrap();
    assert_eq!(raw.len(), 4 + 8 + 64);
    assert_eq!(hex::encode(&raw[..4]), w["key_id"].as_str().unwrap());
    assert_eq!(
        u64::from_be_bytes(raw[4..12].try_into().unwrap()),
        TIMESTAMP
    );
    let sig = Signature::from_slice(&raw[12..]).unwrap();
    key.verify_strict(&read("signed_message.bin"), &sig)
        .unwrap();
    // "— " (U+2014, then a space), the name, a space, the base64, LF.
    let line = read_text("signature_line.txt");
    let mut by_hand = vec![0xe2, 0x80, 0x94, b' '];
    by_hand.extend_from_slice(WITNESS_NAME.as_bytes());
    by_hand.push(b' ');
    by_hand.extend_from_slice(b64.as_bytes());
    by_hand.push(b'\n');
    assert_eq!(line.as_bytes(), by_hand);
    // The cosigned note is the log's note with the line appended.
    let cosigned = read_text("cosigned.note");
    assert_eq!(cosigned, format!("{}{line}", read_text("checkpoint.note")));
    let witness = WitnessKey::parse(&read_line("witness.vkey")).unwrap();
    let found =
        cosignature::valid_cosignatures(cosigned.as_bytes(), std::slice::from_ref(&witness));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].timestamp, TIMESTAMP);
    assert_eq!(found[0].line, line);
    let cp = cosignature::verify_witnessed(
        cosigned.as_bytes(),
        &read_line("log.vkey"),
        std::slice::from_ref(&witness),
        1,
    )
    .unwrap();
    assert_eq!(cp.size(), SIZE);
    assert!(matches!(
        cosignature::verify_witnessed(
            cosigned.as_bytes(),
            &read_line("log.vkey"),
            std::slice::from_ref(&witness),
            2
        ),
        Err(CosignatureError::QuorumNotMet {
            found: 1,
            required: 2
        })
    ));
    // Any changed bit of the timestamp or signature, and the line no longer counts.
    for byte in [5usize, 11, 12, 40, 75] {
        let mut bad = raw.clone();
        bad[byte] ^= 0x01;
        let tampered = cosigned.replace(&b64, &BASE64_STANDARD.encode(&bad));
        assert!(
            cosignature::valid_cosignatures(tampered.as_bytes(), std::slice::from_ref(&witness))
                .is_empty(),
            "byte {byte}"
        );
    }
    // On the old checkpoint the same line is not a cosignature.
    let moved = format!("{}{line}", read_text("old_checkpoint.note"));
    assert!(cosignature::valid_cosignatures(moved.as_bytes(), &[witness]).is_empty());
}

#[test]
fn add_checkpoint_body_by_hand() {
    let body = read("add_checkpoint.body");
    let req = AddCheckpoint::parse(&body).unwrap();
    assert_eq!(req.old_size, OLD_SIZE);
    assert_eq!(req.checkpoint, read("checkpoint.note"));
    let mut by_hand = format!("old {OLD_SIZE}\n");
    for h in &req.proof {
        by_hand.push_str(&BASE64_STANDARD.encode(h.0));
        by_hand.push('\n');
    }
    by_hand.push('\n');
    by_hand.push_str(&read_text("checkpoint.note"));
    assert_eq!(body, by_hand.as_bytes());
    let old = checkpoint::unverified(&read_text("old_checkpoint.note")).unwrap();
    let new = checkpoint::unverified(&read_text("checkpoint.note")).unwrap();
    merkle::check_tree(&req.proof, SIZE, *new.hash(), OLD_SIZE, *old.hash()).unwrap();
    assert!(!req.proof.is_empty() && req.proof.len() <= cosignature::MAX_PROOF_LINES);
}

/// tlog-cosignature's example: the checkpoint and its `witness.example.com/w1` cosignature,
/// and the signed message it spells out. The spec gives no public key, so the signature
/// itself cannot be checked; its key id and timestamp are decoded, and the timestamp is the
/// one of the example's `time` line.
#[test]
fn spec_cosignature_example_decodes() {
    let note = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\
        — example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n\
        — witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n";
    let line = "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==";
    let sig = signed_note::Signature::from_bytes(line.as_bytes()).unwrap();
    assert_eq!(sig.name(), "witness.example.com/w1");
    assert_eq!(sig.id(), 0x8d66_cf3f);
    assert_eq!(sig.signature().len(), 8 + 64);
    let timestamp = u64::from_be_bytes(sig.signature()[..8].try_into().unwrap());
    assert_eq!(timestamp, 1_679_315_147);
    let body = cosignature::note_body(note.as_bytes()).unwrap();
    assert_eq!(
        cosignature::signed_message(&body, timestamp),
        b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    );
    // Appending a line that is already there changes nothing.
    assert_eq!(
        cosignature::with_signature_lines(note, &[format!("{line}\n")]).unwrap(),
        note
    );
}

/// tlog-witness's example request body parses: old size, four proof hashes, the checkpoint
/// with its two log signatures. Its example response lines are note signature lines of the
/// cosignature shape (4-byte key id, 8-byte timestamp, 64-byte signature).
#[test]
fn spec_witness_examples_parse() {
    let body = "old 20852014\n\
        PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n\
        jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n\
        5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n\
        /6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n\
        \n\
        example.com/behind-the-sofa\n\
        20852163\n\
        CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\
        \n\
        — example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n\
        — example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n";
    let req = AddCheckpoint::parse(body.as_bytes()).unwrap();
    assert_eq!(req.old_size, 20_852_014);
    assert_eq!(req.proof.len(), 4);
    assert_eq!(
        merkle::encode_hash(&req.proof[0]),
        "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw="
    );
    let cp = checkpoint::unverified(std::str::from_utf8(&req.checkpoint).unwrap()).unwrap();
    assert_eq!(cp.origin(), "example.com/behind-the-sofa");
    assert_eq!(cp.size(), 20_852_163);
    assert_eq!(req.to_body(), body.as_bytes());
    for (line, id) in [
        ("— witness.example/w1 CMp+6LWBU0anHGH5aNDTJkH/gj79sG+T6+iP2ThYN5krrDJbR1HDnucjL39QsZTSvVjyQLrdk3DXDqI5G2HgLatVs0pWh6Up69HVOw==", 0x08ca_7ee8u32),
        ("— witness.example/w1 I7rEps0pvK2UqkS2gSpVUDhrhVtQV9lgF6pRrWAvjJHjyWpW7VcE3SiOlVlbQNt64vWhO+DlkL0+UfzuOBMh9ChdMkP1vi/lCAsmlw==", 0x23ba_c4a6),
        ("— witness.example/w2 AWui8Sk55XjYLOijihBjhqEH6nS1ndDymE0a+6idX7pLcnoB+dhnz0854aLZgrrKbYKA7nC3HNJhm/kWl7oJlqU3rXXvpysAdyP3wQ==", 0x016b_a2f1),
    ] {
        let sig = signed_note::Signature::from_bytes(line.as_bytes()).unwrap();
        assert_eq!(sig.id(), id);
        assert_eq!(sig.signature().len(), 8 + 64);
    }
    // The 409 body of the spec: the size in decimal and a newline.
    assert_eq!(
        cosignature::parse_size_body(b"20852014\n"),
        Some(20_852_014)
    );
}
