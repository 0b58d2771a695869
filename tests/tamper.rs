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
                Decimal::from(s),
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
    let size = ledger.head().unwrap().0;
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
