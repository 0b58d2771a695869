//! The durable spool: an append-only JSON-lines file of signed envelopes, and an
//! "acknowledged up to here" marker. A record is sent only after its line is fsynced here, so
//! whatever the ledger has seen survives a crash, and no seq is used twice.
//!
//! Files in the spool directory:
//! - `spool-NNNNNNNN.jsonl`: one line per record, `{"seq":N,"envelope":{…}}`; the last line of
//!   each append also carries `"cursor"`, the producer's position (for the agent the end of
//!   the interval, for the market signer its source position). Lines are appended and fsynced;
//!   nothing is ever rewritten in place.
//! - `acked.json`: `{"file":…,"offset":…,"last_seq":…,"last_cursor":…}`, replaced atomically
//!   (write a temporary file, fsync, rename, fsync the directory). Records before `offset` in
//!   `file` are acknowledged. `last_seq` and `last_cursor` survive compaction.
//! - `dead-letter.jsonl`: records the ledger refused for good, with the reason, fsynced before
//!   the marker moves past them.
//! - `held/`: the held queue, records the ledger refused because of the signer's registration
//!   or configuration (an unregistered lease, a region outside the key's scope: see
//!   [`super::sender::disposition`]). It is a spool of its own (the same files, the same
//!   fsyncs), but in no seq order: a record is appended there, fsynced, before the main marker
//!   moves past it, so the records after it flow on while it waits; it is retried from the front
//!   and, refused again, appended again at the back before its old line is acknowledged.
//!   Held records count towards the spool's bound, and are never dropped.
//!
//! Compaction (once the acknowledged prefix is at least `compact_after` bytes and at least as
//! long as the unacknowledged tail) copies the tail to the next `spool-*.jsonl`, fsyncs it,
//! then switches the marker to it; a crash at any point leaves the marker naming a complete file.
//! On open, a torn last line (a crash mid-append, before its fsync, so never sent) is cut off.

use gpuledger_core::envelope::Envelope;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Name of the acknowledgement marker.
pub const MARKER_FILE: &str = "acked.json";
/// Name of the dead-letter file.
pub const DEAD_LETTER_FILE: &str = "dead-letter.jsonl";
/// Name of the held queue's folder in the spool directory.
pub const HELD_DIR: &str = "held";
/// The cursor of every line of the held queue: each line is an append of its own.
const HELD_CURSOR: &str = "held";

/// Spool failures.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("spool {path} is damaged: {detail}; it is left as it is for inspection")]
    Corrupt { path: PathBuf, detail: String },
    #[error("spool full: {pending} records not yet acknowledged (limit {max}); measuring stops until the ledger acknowledges records")]
    Full { pending: u64, max: u64 },
}

#[derive(Serialize, Deserialize, Clone)]
struct Marker {
    file: String,
    offset: u64,
    last_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_cursor: Option<String>,
}

#[derive(Serialize)]
struct LineOut<'a> {
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<&'a str>,
    envelope: &'a Envelope,
}

#[derive(Deserialize)]
struct LineIn<'a> {
    seq: u64,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(borrow)]
    envelope: &'a RawValue,
}

/// One unacknowledged record as read back from the spool.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its seq.
    pub seq: u64,
    /// The envelope's JSON exactly as spooled.
    pub envelope: String,
    /// Offset just past its line in the current spool file.
    end: u64,
    generation: u64,
    /// Read from the held queue.
    held: bool,
}

/// The spool of one signer.
pub struct Spool {
    dir: PathBuf,
    marker: Marker,
    generation: u64,
    file: File,
    len: u64,
    pending: u64,
    max_pending: u64,
    compact_after: u64,
    /// The held queue (`None` in the held queue itself, whose seqs are in no order).
    held: Option<Box<Spool>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_owned(),
        source,
    }
}

fn file_name(generation: u64) -> String {
    format!("spool-{generation:08}.jsonl")
}

fn generation_of(name: &str) -> Option<u64> {
    name.strip_prefix("spool-")?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Replaces `path` with `bytes` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SpoolError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(dir)
}

/// What a scan of a spool file found: its last complete append.
struct Scan {
    /// The offset just past the last complete append; what follows it is torn.
    end: usize,
    /// The last seq and the cursor of that append.
    seq: u64,
    cursor: Option<String>,
    /// Records from the acknowledged offset up to `end`.
    pending: u64,
}

impl Scan {
    /// Reads the lines of a spool file's bytes `data`, acknowledged up to `acked`, up to the
    /// last line that carries a cursor (the end of an append). In an `ordered` queue seqs must
    /// strictly increase; only the last line may be unreadable (torn by a crash), and anything
    /// else damaged is [`SpoolError::Corrupt`].
    fn of(data: &[u8], acked: u64, ordered: bool, path: &Path) -> Result<Scan, SpoolError> {
        let corrupt = |detail| SpoolError::Corrupt {
            path: path.to_owned(),
            detail,
        };
        let mut complete = Scan {
            end: 0,
            seq: 0,
            cursor: None,
            pending: 0,
        };
        let (mut pos, mut file_seq, mut pending) = (0usize, 0u64, 0u64);
        while pos < data.len() {
            let Some((n, l)) = Scan::line(&data[pos..]) else {
                Scan::check_torn_tail(&data[pos..], pos).map_err(corrupt)?;
                break;
            };
            if ordered && l.seq <= file_seq {
                return Err(corrupt(format!("seq {} after seq {file_seq}", l.seq)));
            }
            file_seq = file_seq.max(l.seq);
            if pos as u64 >= acked {
                pending += 1;
            }
            pos += n + 1;
            if l.cursor.is_some() {
                complete = Scan {
                    end: pos,
                    seq: l.seq,
                    cursor: l.cursor,
                    pending,
                };
            }
        }
        debug_assert!(complete.end <= data.len());
        Ok(complete)
    }

    /// The line at the front of `rest` and its length without the newline; `None` when it has
    /// no newline or cannot be read.
    fn line(rest: &[u8]) -> Option<(usize, LineIn<'_>)> {
        let n = rest.iter().position(|b| *b == b'\n')?;
        let l = serde_json::from_slice::<LineIn<'_>>(&rest[..n]).ok()?;
        Some((n, l))
    }

    /// Only the tail may be damaged: `rest`, from the unreadable line at byte `at`, must hold
    /// no full line after that one.
    fn check_torn_tail(rest: &[u8], at: usize) -> Result<(), String> {
        let lines_after = rest.iter().filter(|b| **b == b'\n').count();
        if lines_after > 1 || (lines_after == 1 && !rest.ends_with(b"\n")) {
            return Err(format!("unreadable line at byte {at}"));
        }
        Ok(())
    }
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, holding at most `max_pending` unacknowledged
    /// records and compacting once `compact_after` acknowledged bytes precede the first
    /// unacknowledged one.
    pub fn open(dir: &Path, max_pending: u64, compact_after: u64) -> Result<Spool, SpoolError> {
        let mut s = Spool::open_queue(dir, max_pending, compact_after, true)?;
        let held = Spool::open_queue(&dir.join(HELD_DIR), u64::MAX, compact_after, false)?;
        s.held = Some(Box::new(held));
        Ok(s)
    }

    /// Opens one queue: the spool (`ordered`, seqs strictly increasing) or the held queue.
    fn open_queue(
        dir: &Path,
        max_pending: u64,
        compact_after: u64,
        ordered: bool,
    ) -> Result<Spool, SpoolError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        let marker_path = dir.join(MARKER_FILE);
        let marker = match fs::read(&marker_path) {
            Ok(b) => serde_json::from_slice::<Marker>(&b).map_err(|e| SpoolError::Corrupt {
                path: marker_path.clone(),
                detail: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let m = Marker {
                    file: file_name(1),
                    offset: 0,
                    last_seq: 0,
                    last_cursor: None,
                };
                File::create(dir.join(&m.file)).map_err(io(dir))?;
                write_atomic(&marker_path, &serde_json::to_vec(&m).expect("plain struct"))?;
                m
            }
            Err(e) => return Err(io(&marker_path)(e)),
        };
        let generation = generation_of(&marker.file).ok_or_else(|| SpoolError::Corrupt {
            path: marker_path.clone(),
            detail: format!("names {:?}, not a spool file", marker.file),
        })?;
        // Files a compaction wrote but never switched to, and old files it did not delete.
        for e in fs::read_dir(dir).map_err(io(dir))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if (generation_of(&name).is_some() && name != marker.file) || name.ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
        let path = dir.join(&marker.file);
        let mut s = Spool {
            dir: dir.to_owned(),
            file: OpenOptions::new()
                .append(true)
                .read(true)
                .open(&path)
                .map_err(io(&path))?,
            marker,
            generation,
            len: 0,
            pending: 0,
            max_pending,
            compact_after,
            held: None,
        };
        s.recover(ordered)?;
        Ok(s)
    }

    /// Scans the file: finds the last seq and cursor, counts unacknowledged records, and cuts
    /// off a torn append. Every append ends with a line carrying the cursor, so lines after the
    /// last such line (or a partial line) are an append that never completed its fsync, and
    /// so was never sent: they are removed, all or nothing.
    fn recover(&mut self, ordered: bool) -> Result<(), SpoolError> {
        let path = self.path();
        let mut data = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut data))
            .map_err(io(&path))?;
        let Scan {
            end,
            seq,
            cursor,
            pending,
        } = Scan::of(&data, self.marker.offset, ordered, &path)?;
        if (end as u64) < self.marker.offset {
            return Err(SpoolError::Corrupt {
                path,
                detail: format!(
                    "acknowledged offset {} is past the last complete append ({end})",
                    self.marker.offset
                ),
            });
        }
        if end < data.len() {
            tracing::warn!(
                spool = %path.display(),
                bytes = data.len() - end,
                "cutting off an incomplete append (written before a crash, never sent)"
            );
            self.file.set_len(end as u64).map_err(io(&path))?;
            self.file.sync_all().map_err(io(&path))?;
        }
        self.len = end as u64;
        self.pending = pending;
        if seq > self.marker.last_seq {
            self.marker.last_seq = seq;
            self.marker.last_cursor = cursor;
        }
        debug_assert!(
            self.marker.offset <= self.len,
            "acknowledged within the file"
        );
        Ok(())
    }

    fn path(&self) -> PathBuf {
        self.dir.join(&self.marker.file)
    }

    /// The seq the next record must carry.
    pub fn next_seq(&self) -> u64 {
        self.marker.last_seq + 1
    }

    /// The cursor of the last append, if any.
    pub fn last_cursor(&self) -> Option<&str> {
        self.marker.last_cursor.as_deref()
    }

    /// Records not yet acknowledged by the ledger: those to send and those held.
    pub fn pending(&self) -> u64 {
        self.pending + self.held()
    }

    /// Records in the held queue.
    pub fn held(&self) -> u64 {
        self.held.as_ref().map_or(0, |h| h.pending)
    }

    /// The bound on unacknowledged records.
    pub fn max_pending(&self) -> u64 {
        self.max_pending
    }

    /// Whether `n` more records fit.
    pub fn has_room_for(&self, n: u64) -> bool {
        self.pending() + n <= self.max_pending
    }

    /// Appends signed records (whose seqs must be consecutive from [`Spool::next_seq`]) and
    /// the producer's `cursor`, and fsyncs. All or nothing: on error the file is cut back.
    pub fn append(&mut self, envelopes: &[Envelope], cursor: &str) -> Result<(), SpoolError> {
        if envelopes.is_empty() {
            return Ok(());
        }
        if !self.has_room_for(envelopes.len() as u64) {
            return Err(SpoolError::Full {
                pending: self.pending(),
                max: self.max_pending,
            });
        }
        let mut buf = Vec::with_capacity(envelopes.len() * 700);
        for (i, e) in envelopes.iter().enumerate() {
            assert_eq!(e.seq, self.next_seq() + i as u64, "seqs are consecutive");
            let last = i + 1 == envelopes.len();
            serde_json::to_writer(
                &mut buf,
                &LineOut {
                    seq: e.seq,
                    cursor: last.then_some(cursor),
                    envelope: e,
                },
            )
            .expect("envelopes serialise");
            buf.push(b'\n');
        }
        let path = self.path();
        let written = self
            .file
            .write_all(&buf)
            .and_then(|_| self.file.sync_data());
        if let Err(e) = written {
            let _ = self.file.set_len(self.len);
            return Err(io(&path)(e));
        }
        let before = self.marker.last_seq;
        self.len += buf.len() as u64;
        self.pending += envelopes.len() as u64;
        self.marker.last_seq = envelopes.last().expect("not empty").seq;
        self.marker.last_cursor = Some(cursor.to_owned());
        debug_assert!(self.marker.last_seq > before, "seqs only grow");
        debug_assert!(
            self.pending() <= self.max_pending,
            "the spool holds no more than its bound"
        );
        Ok(())
    }

    /// Up to `max` unacknowledged records to send, oldest first (not the held ones).
    pub fn peek(&self, max: usize) -> Result<Vec<Pending>, SpoolError> {
        let path = self.path();
        let mut f = File::open(&path).map_err(io(&path))?;
        f.seek(SeekFrom::Start(self.marker.offset))
            .map_err(io(&path))?;
        let mut r = BufReader::new(f.take(self.len - self.marker.offset));
        let mut out = Vec::new();
        let mut pos = self.marker.offset;
        let mut line = String::new();
        while out.len() < max {
            line.clear();
            let n = r.read_line(&mut line).map_err(io(&path))?;
            if n == 0 {
                break;
            }
            pos += n as u64;
            let l: LineIn<'_> =
                serde_json::from_str(line.trim_end()).map_err(|e| SpoolError::Corrupt {
                    path: path.clone(),
                    detail: e.to_string(),
                })?;
            out.push(Pending {
                seq: l.seq,
                envelope: l.envelope.get().to_owned(),
                end: pos,
                generation: self.generation,
                held: self.held.is_none(),
            });
        }
        Ok(out)
    }

    /// Writes a refused record and why to the dead-letter file, fsynced. Call before
    /// acknowledging it.
    pub fn dead_letter(&self, p: &Pending, outcome: &serde_json::Value) -> Result<(), SpoolError> {
        let path = self.dir.join(DEAD_LETTER_FILE);
        let envelope: serde_json::Value =
            serde_json::from_str(&p.envelope).unwrap_or(serde_json::Value::Null);
        let line = serde_json::json!({
            "at": gpuledger_core::time::Timestamp::now().to_string(),
            "seq": p.seq,
            "outcome": outcome,
            "envelope": envelope,
        });
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut text = line.to_string();
        text.push('\n');
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_data())
            .map_err(io(&path))
    }

    /// Up to `max` held records, the longest held first.
    pub fn peek_held(&self, max: usize) -> Result<Vec<Pending>, SpoolError> {
        self.held.as_ref().map_or(Ok(Vec::new()), |h| h.peek(max))
    }

    /// Appends `records` (from [`Spool::peek`] or [`Spool::peek_held`]), each with the reason
    /// it was refused for, to the back of the held queue, in one write and one fsync. All or
    /// nothing. Call before acknowledging them.
    pub fn hold(&mut self, records: &[(&Pending, &str)]) -> Result<(), SpoolError> {
        if records.is_empty() {
            return Ok(());
        }
        let h = self.held.as_mut().expect("the spool has a held queue");
        let mut buf = String::new();
        for (p, reason) in records {
            buf.push_str(&format!(
                "{{\"seq\":{},\"cursor\":\"{HELD_CURSOR}\",\"reason\":{},\"envelope\":{}}}\n",
                p.seq,
                serde_json::Value::from(*reason),
                p.envelope
            ));
        }
        let path = h.path();
        let written = h
            .file
            .write_all(buf.as_bytes())
            .and_then(|_| h.file.sync_data());
        if let Err(e) = written {
            let _ = h.file.set_len(h.len);
            return Err(io(&path)(e));
        }
        h.len += buf.len() as u64;
        h.pending += records.len() as u64;
        let top = records.iter().map(|(p, _)| p.seq).max().unwrap_or(0);
        h.marker.last_seq = h.marker.last_seq.max(top);
        Ok(())
    }

    /// Acknowledges the records from the front of the held queue through `through` (from the
    /// latest [`Spool::peek_held`]): delivered, dead-lettered or held again at the back.
    pub fn ack_held(&mut self, through: &Pending, count: u64) -> Result<(), SpoolError> {
        self.held
            .as_mut()
            .expect("the spool has a held queue")
            .ack(through, count)
    }

    /// Marks every record up to and including `through` (from the latest [`Spool::peek`], or
    /// from [`Spool::peek_held`] for [`Spool::ack_held`]) as acknowledged, durably; compacts
    /// when the acknowledged prefix is large.
    pub fn ack(&mut self, through: &Pending, count: u64) -> Result<(), SpoolError> {
        assert_eq!(through.held, self.held.is_none(), "ack of the other queue");
        assert_eq!(through.generation, self.generation, "ack from a stale peek");
        assert!(through.end > self.marker.offset && through.end <= self.len);
        assert!(
            count >= 1 && count <= self.pending,
            "acks no more than is pending"
        );
        self.marker.offset = through.end;
        self.pending -= count;
        // Compact only once the acknowledged prefix is also at least as long as the pending
        // tail: each compaction then copies no more bytes than were acknowledged since the
        // last one, so draining a large backlog copies it O(1) times, not once per
        // `compact_after` bytes.
        let tail = self.len - self.marker.offset;
        if self.marker.offset >= self.compact_after && self.marker.offset >= tail {
            return self.compact();
        }
        self.write_marker()
    }

    fn write_marker(&self) -> Result<(), SpoolError> {
        write_atomic(
            &self.dir.join(MARKER_FILE),
            &serde_json::to_vec(&self.marker).expect("plain struct"),
        )
    }

    fn compact(&mut self) -> Result<(), SpoolError> {
        let old = self.path();
        let next = self.generation + 1;
        let new_path = self.dir.join(file_name(next));
        let mut src = File::open(&old).map_err(io(&old))?;
        src.seek(SeekFrom::Start(self.marker.offset))
            .map_err(io(&old))?;
        let mut dst = File::create(&new_path).map_err(io(&new_path))?;
        let copied = std::io::copy(&mut src.take(self.len - self.marker.offset), &mut dst)
            .map_err(io(&new_path))?;
        dst.sync_all().map_err(io(&new_path))?;
        sync_dir(&self.dir)?;
        let marker = Marker {
            file: file_name(next),
            offset: 0,
            ..self.marker.clone()
        };
        write_atomic(
            &self.dir.join(MARKER_FILE),
            &serde_json::to_vec(&marker).expect("plain struct"),
        )?;
        self.file = OpenOptions::new()
            .append(true)
            .read(true)
            .open(&new_path)
            .map_err(io(&new_path))?;
        self.marker = marker;
        self.generation = next;
        self.len = copied;
        let _ = fs::remove_file(&old);
        tracing::debug!(spool = %new_path.display(), bytes = copied, "spool compacted");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_core::sample;
    use gpuledger_core::time::Timestamp;
    use rust_decimal::Decimal;

    fn rec(seq: u64) -> Envelope {
        let k = sample::key("spool-test");
        sample::energy(
            "node-s",
            &k,
            seq,
            None,
            Decimal::from(seq),
            Timestamp::from_unix(1_800_000_000 + 10 * seq as i64).unwrap(),
        )
    }

    #[test]
    fn survives_reopen_torn_tail_compaction_and_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 5, 1).unwrap();
        assert_eq!(s.next_seq(), 1);
        s.append(&[rec(1), rec(2)], "c2").unwrap();
        s.append(&[rec(3)], "c3").unwrap();
        assert!(matches!(
            s.append(&[rec(4), rec(5), rec(6)], "x"),
            Err(SpoolError::Full { pending: 3, max: 5 })
        ));
        drop(s);
        // An append torn by a crash (a whole line without the cursor, then part of one) is cut off.
        let file = dir.path().join(file_name(1));
        OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap()
            .write_all(b"{\"seq\":4,\"envelope\":{}}\n{\"seq\":5,\"env")
            .unwrap();
        let mut s = Spool::open(dir.path(), 5, 1).unwrap();
        assert_eq!(
            (s.next_seq(), s.pending(), s.last_cursor()),
            (4, 3, Some("c3"))
        );
        let p = s.peek(2).unwrap();
        assert_eq!(p.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![1, 2]);
        s.ack(&p[1], 2).unwrap(); // compacts (limit 1 byte)
        assert_eq!(s.pending(), 1);
        drop(s);
        let mut s = Spool::open(dir.path(), 5, 1).unwrap();
        assert_eq!((s.next_seq(), s.pending()), (4, 1));
        let p = s.peek(10).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].seq, 3);
        s.ack(&p[0], 1).unwrap();
        drop(s);
        // Everything acknowledged and compacted away: seq and cursor still known.
        let s = Spool::open(dir.path(), 5, 1).unwrap();
        assert_eq!(
            (s.next_seq(), s.pending(), s.last_cursor()),
            (4, 0, Some("c3"))
        );
        assert!(s.peek(10).unwrap().is_empty());
        assert!(dir.path().join(file_name(3)).exists());
        assert!(!dir.path().join(file_name(1)).exists());
    }

    /// A held record leaves the spool's order, survives a reopen, counts towards the bound,
    /// goes to the back when held again, and is gone only once acknowledged from the queue.
    #[test]
    fn held_records_wait_in_their_own_queue() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 4, 1 << 20).unwrap();
        s.append(&[rec(1), rec(2), rec(3)], "c3").unwrap();
        let p = s.peek(10).unwrap();
        s.hold(&[(&p[0], "unknown_lease"), (&p[1], "region_not_allowed")])
            .unwrap();
        s.ack(&p[2], 3).unwrap();
        assert_eq!((s.pending(), s.held()), (2, 2));
        assert!(
            s.has_room_for(2) && !s.has_room_for(3),
            "held records are in the bound"
        );
        drop(s);
        let mut s = Spool::open(dir.path(), 4, 1 << 20).unwrap();
        assert_eq!((s.next_seq(), s.pending(), s.held()), (4, 2, 2));
        assert!(s.peek(10).unwrap().is_empty(), "nothing to send in order");
        let h = s.peek_held(1).unwrap();
        assert_eq!(h[0].seq, 1);
        assert_eq!(h[0].envelope, p[0].envelope, "byte for byte");
        // Refused again: to the back of the queue, then acknowledged at the front.
        s.hold(&[(&h[0], "unknown_lease")]).unwrap();
        s.ack_held(&h[0], 1).unwrap();
        let line = std::fs::read_to_string(dir.path().join(HELD_DIR).join(file_name(1))).unwrap();
        assert!(line.contains("\"reason\":\"region_not_allowed\""), "{line}");
        drop(s);
        let mut s = Spool::open(dir.path(), 4, 1 << 20).unwrap();
        let h = s.peek_held(10).unwrap();
        assert_eq!(h.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![2, 1]);
        s.ack_held(&h[1], 2).unwrap();
        assert_eq!((s.pending(), s.held()), (0, 0));
        drop(s);
        let s = Spool::open(dir.path(), 4, 1 << 20).unwrap();
        assert_eq!((s.next_seq(), s.pending(), s.held()), (4, 0, 0));
    }
}
