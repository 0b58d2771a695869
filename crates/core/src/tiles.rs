//! C2SP tlog-tiles resource names: hash tiles `tile/<L>/<N>[.p/<W>]` and entry bundles
//! `tile/entries/<N>[.p/<W>]`, of the fixed height 8 (256 hashes to a full tile), and the
//! entry-bundle encoding (big-endian `uint16` length, then the leaf bytes, per entry).
//!
//! `tlog_tiles::Tile` names tiles the way Go's sumdb does (`tile/<H>/<L>/<N>`, with the height
//! in the path); C2SP drops the height and names entry bundles differently, so the paths are
//! parsed and written here, and [`TilePath::to_tlog`] gives the `tlog_tiles::Tile` of height 8
//! that reads or checks the same hashes.
//!
//! Everything here is pure: which tiles a server may serve for a given checkpoint size is a
//! function of the path and the size alone ([`TilePath::within`]).

use super::limits::MAX_ENVELOPE_BYTES;

/// Height of every tile: a full tile holds 2^8 = 256 hashes (C2SP tlog-tiles fixes it).
pub const TILE_HEIGHT: u8 = 8;
/// Hashes (or entries) in a full tile.
pub const FULL_WIDTH: u32 = 1 << TILE_HEIGHT;
/// Highest tile level a path may name.
pub const MAX_LEVEL: u8 = 63;
/// Bytes of one hash in a tile.
pub const HASH_BYTES: usize = 32;
/// Longest tile path parsed, in bytes: `tile/entries/` plus seven index elements and a width
/// is under 50; anything longer is refused before it is split.
pub const MAX_PATH_BYTES: usize = 64;
/// Longest leaf an entry bundle can carry: its length is a big-endian `uint16`.
pub const MAX_BUNDLE_ENTRY_BYTES: usize = u16::MAX as usize;
/// Bytes a leaf adds around its canonical envelope, at most (`{"envelope":`, the index, the
/// base64 `prev`, `received_at`, `v`; checked by a test against `leaf::leaf_bytes`).
pub const MAX_LEAF_FRAME_BYTES: usize = 256;

// Every leaf fits an entry bundle: the envelope limit plus the leaf's frame is under 65,535.
const _: () = assert!(MAX_ENVELOPE_BYTES + MAX_LEAF_FRAME_BYTES <= MAX_BUNDLE_ENTRY_BYTES);

/// What a tile holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TileKind {
    /// Merkle tree hashes at tree level `8 × level`.
    Hashes {
        /// The tile level, 0 to [`MAX_LEVEL`].
        level: u8,
    },
    /// The entries themselves (an entry bundle), alongside the level-0 hash tile.
    Entries,
}

/// One C2SP tile or entry bundle: what it holds, its index within its level, and its width
/// (1 to 255 for a partial tile, [`FULL_WIDTH`] for a full one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TilePath {
    kind: TileKind,
    index: u64,
    width: u32,
}

/// A path that names no tile, or names one in a non-canonical way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed tile path {path:?}: {reason}")]
pub struct TilePathError {
    /// The path as given (cut at [`MAX_PATH_BYTES`]).
    pub path: String,
    /// Why it was refused.
    pub reason: &'static str,
}

/// An entry bundle that cannot be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// A leaf longer than a `uint16` length can say.
    #[error("entry {position} of the bundle is {len} bytes, over the {MAX_BUNDLE_ENTRY_BYTES} a bundle can carry")]
    EntryTooLong {
        /// Position of the leaf in the bundle.
        position: usize,
        /// Its length.
        len: usize,
    },
    /// The bytes end inside a length or an entry.
    #[error("the bundle is truncated in entry {position}")]
    Truncated {
        /// Position of the entry that is cut.
        position: usize,
    },
}

impl TilePath {
    /// A hash tile; `None` when the level is over [`MAX_LEVEL`] or the width is 0 or over
    /// [`FULL_WIDTH`].
    pub fn hashes(level: u8, index: u64, width: u32) -> Option<TilePath> {
        (level <= MAX_LEVEL && (1..=FULL_WIDTH).contains(&width)).then_some(TilePath {
            kind: TileKind::Hashes { level },
            index,
            width,
        })
    }

    /// An entry bundle; `None` when the width is 0 or over [`FULL_WIDTH`].
    pub fn entries(index: u64, width: u32) -> Option<TilePath> {
        (1..=FULL_WIDTH).contains(&width).then_some(TilePath {
            kind: TileKind::Entries,
            index,
            width,
        })
    }

    /// What the tile holds.
    pub fn kind(&self) -> TileKind {
        self.kind
    }

    /// The tile level (0 for entry bundles, which sit beside the level-0 tiles).
    pub fn level(&self) -> u8 {
        match self.kind {
            TileKind::Hashes { level } => level,
            TileKind::Entries => 0,
        }
    }

    /// The index `N` of the tile within its level.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// How many hashes (or entries) it holds.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Whether it is a full tile (256 wide), which never changes and may be cached for ever.
    pub fn is_full(&self) -> bool {
        self.width == FULL_WIDTH
    }

    /// Entries one hash of this tile covers: 256^level (`None` past `u64`).
    fn span(&self) -> Option<u64> {
        1u64.checked_shl(u32::from(TILE_HEIGHT) * u32::from(self.level()))
    }

    /// The first entry the tile covers, `N × 256^(L+1)` (`None` past `u64`).
    pub fn start(&self) -> Option<u64> {
        self.index
            .checked_mul(u64::from(FULL_WIDTH))?
            .checked_mul(self.span()?)
    }

    /// One past the last entry its hashes (or entries) cover, `(N × 256 + W) × 256^L`
    /// (`None` past `u64`). A tree must have at least this many entries for the tile to exist.
    pub fn end(&self) -> Option<u64> {
        self.index
            .checked_mul(u64::from(FULL_WIDTH))?
            .checked_add(u64::from(self.width))?
            .checked_mul(self.span()?)
    }

    /// Whether a tree of `size` entries holds everything this tile names, which is when the
    /// server serves it: `end ≤ size`. For a full tile this is the spec's rule; for a partial
    /// tile of width W any W whose entries the tree holds is served (not only the one width
    /// `⌊size / 256^L⌋ mod 256` of some checkpoint's size), since its hashes are the same in
    /// every larger tree.
    pub fn within(&self, size: u64) -> bool {
        self.end().is_some_and(|e| e <= size)
    }

    /// The stored-hash indexes (tlog order) of the tile's hashes, in tile order. Empty for an
    /// entry bundle.
    pub fn stored_hash_indexes(&self) -> Vec<u64> {
        let TileKind::Hashes { level } = self.kind else {
            return Vec::new();
        };
        let first = self.index << TILE_HEIGHT;
        (0..u64::from(self.width))
            .map(|i| tlog_tiles::stored_hash_index(TILE_HEIGHT * level, first + i))
            .collect()
    }

    /// The `tlog_tiles::Tile` (height 8) of the same hashes, for `Tile::read_data`,
    /// `TileHashReader` and the like (entry bundles map to tlog's data tiles).
    pub fn to_tlog(&self) -> tlog_tiles::Tile {
        tlog_tiles::Tile::new(
            TILE_HEIGHT,
            self.level(),
            self.index,
            self.width,
            self.kind == TileKind::Entries,
        )
    }

    /// The C2SP tile of a `tlog_tiles::Tile` of height 8; `None` for any other height.
    pub fn from_tlog(t: &tlog_tiles::Tile) -> Option<TilePath> {
        if t.height() != TILE_HEIGHT {
            return None;
        }
        if t.is_data() {
            TilePath::entries(t.level_index(), t.width())
        } else {
            TilePath::hashes(t.level(), t.level_index(), t.width())
        }
    }

    /// The C2SP path, without a leading slash: `tile/0/x001/234`, `tile/entries/005.p/17`.
    pub fn path(&self) -> String {
        let level = match self.kind {
            TileKind::Hashes { level } => level.to_string(),
            TileKind::Entries => "entries".to_owned(),
        };
        let mut out = format!("tile/{level}/{}", encode_index(self.index));
        if !self.is_full() {
            out.push_str(&format!(".p/{}", self.width));
        }
        out
    }

    /// Parses a C2SP path (without a leading slash). Only the canonical spelling is accepted:
    /// a level 0 to 63 and a width 1 to 255 without leading zeros, the index in three-digit
    /// elements, all but the last prefixed with `x`, with no leading `x000`.
    pub fn parse(path: &str) -> Result<TilePath, TilePathError> {
        let err = |reason| TilePathError {
            path: path.chars().take(MAX_PATH_BYTES).collect(),
            reason,
        };
        if path.len() > MAX_PATH_BYTES {
            return Err(err("the path is too long"));
        }
        let rest = path
            .strip_prefix("tile/")
            .ok_or_else(|| err("it does not start with tile/"))?;
        let (level, rest) = rest
            .split_once('/')
            .ok_or_else(|| err("it has no tile index"))?;
        let (index, width) = match rest.split_once(".p/") {
            Some((index, width)) => (index, Some(width)),
            None => (rest, None),
        };
        let index = decode_index(index).ok_or_else(|| {
            err("the index is not three-digit elements, all but the last starting with x, without leading x000")
        })?;
        let width = match width {
            None => FULL_WIDTH,
            Some(w) => decimal(w)
                .filter(|w| (1..u64::from(FULL_WIDTH)).contains(w))
                .ok_or_else(|| err("the width is not an integer 1 to 255 without leading zeros"))?
                as u32,
        };
        let tile = if level == "entries" {
            TilePath::entries(index, width)
        } else {
            let level = decimal(level)
                .filter(|l| *l <= u64::from(MAX_LEVEL))
                .ok_or_else(|| {
                    err("the level is not an integer 0 to 63 without leading zeros, nor entries")
                })?;
            TilePath::hashes(level as u8, index, width)
        };
        let tile = tile.ok_or_else(|| err("the width is out of range"))?;
        // The grammar above admits one spelling per tile; this keeps it so.
        debug_assert_eq!(tile.path(), path);
        Ok(tile)
    }
}

/// `N` in three-digit elements, all but the last prefixed with `x`: 1234067 → `x001/x234/067`.
fn encode_index(mut n: u64) -> String {
    let mut parts = vec![format!("{:03}", n % 1000)];
    while n >= 1000 {
        n /= 1000;
        parts.push(format!("x{:03}", n % 1000));
    }
    parts.reverse();
    parts.join("/")
}

/// The inverse of [`encode_index`], canonical spellings only.
fn decode_index(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split('/').collect();
    let (last, prefix) = parts.split_last()?;
    let three = |d: &str| {
        (d.len() == 3 && d.bytes().all(|b| b.is_ascii_digit())).then(|| d.parse::<u64>().ok())?
    };
    let mut n: u64 = 0;
    for (i, p) in prefix.iter().enumerate() {
        let v = three(p.strip_prefix('x')?)?;
        if i == 0 && v == 0 {
            return None;
        }
        n = n.checked_mul(1000)?.checked_add(v)?;
    }
    n.checked_mul(1000)?.checked_add(three(last)?)
}

/// A decimal integer without sign or leading zeros (`0` itself is fine).
fn decimal(s: &str) -> Option<u64> {
    let ok = !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'))
        && s.len() <= 20;
    ok.then(|| s.parse().ok())?
}

/// Every tile of a tree of `size` entries, as C2SP lists them: at each level the full tiles,
/// then the partial tile if its width `⌊size / 256^L⌋ mod 256` is not 0. Level by level, from 0.
pub fn tiles_of_tree(size: u64) -> Vec<TilePath> {
    let mut out = Vec::new();
    for level in 0..=MAX_LEVEL {
        let shift = u32::from(TILE_HEIGHT) * u32::from(level);
        if shift >= 64 || size >> shift == 0 {
            break;
        }
        let hashes = size >> shift;
        let full = hashes >> TILE_HEIGHT;
        for index in 0..full {
            out.extend(TilePath::hashes(level, index, FULL_WIDTH));
        }
        let width = (hashes % u64::from(FULL_WIDTH)) as u32;
        if width > 0 {
            out.extend(TilePath::hashes(level, full, width));
        }
    }
    out
}

/// The tiles and entry bundles of a tree of `to` entries that a copy holding the tree of
/// `from` entries lacks: at each level (and for the entry bundles, alongside level 0) the tile
/// that was partial at `from` (now wider or full) and every tile after it. A copy that adds
/// these to what it has holds every tile of `to` ([`tiles_of_tree`]) plus partial tiles that a
/// wider one now supersedes. Empty when `to <= from`.
pub fn tiles_grown(from: u64, to: u64) -> Vec<TilePath> {
    let mut out = Vec::new();
    if to <= from {
        return out;
    }
    let full = u64::from(FULL_WIDTH);
    let mut push_level = |old: u64, new: u64, make: &dyn Fn(u64, u32) -> Option<TilePath>| {
        if new <= old {
            return;
        }
        for index in old / full..new.div_ceil(full) {
            let width = (new - index * full).min(full) as u32;
            out.extend(make(index, width));
        }
    };
    push_level(from, to, &|i, w| TilePath::entries(i, w));
    for level in 0..=MAX_LEVEL {
        let shift = u32::from(TILE_HEIGHT) * u32::from(level);
        if shift >= 64 || to >> shift == 0 {
            break;
        }
        push_level(from >> shift, to >> shift, &|i, w| {
            TilePath::hashes(level, i, w)
        });
    }
    out
}

/// Writes an entry bundle: each leaf as a big-endian `uint16` length and its bytes.
pub fn encode_bundle<'a>(
    leaves: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, BundleError> {
    let mut out = Vec::new();
    for (position, leaf) in leaves.into_iter().enumerate() {
        let len = u16::try_from(leaf.len()).map_err(|_| BundleError::EntryTooLong {
            position,
            len: leaf.len(),
        })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(leaf);
    }
    Ok(out)
}

/// Reads an entry bundle into its leaves.
pub fn decode_bundle(mut bytes: &[u8]) -> Result<Vec<&[u8]>, BundleError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let position = out.len();
        let (len, rest) = bytes
            .split_first_chunk::<2>()
            .ok_or(BundleError::Truncated { position })?;
        let len = usize::from(u16::from_be_bytes(*len));
        if rest.len() < len {
            return Err(BundleError::Truncated { position });
        }
        let (leaf, rest) = rest.split_at(len);
        out.push(leaf);
        bytes = rest;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(p: &str) -> TilePath {
        TilePath::parse(p).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn paths_round_trip() {
        for (p, level, index, width) in [
            ("tile/0/000", Some(0), 0, 256),
            ("tile/0/273.p/112", Some(0), 273, 112),
            ("tile/1/001.p/17", Some(1), 1, 17),
            ("tile/2/000.p/1", Some(2), 0, 1),
            ("tile/63/x001/x234/067", Some(63), 1_234_067, 256),
            ("tile/3/x001/000", Some(3), 1000, 256),
            ("tile/entries/999.p/255", None, 999, 255),
            (
                "tile/entries/x018/x446/x744/x073/x709/x551/615",
                None,
                u64::MAX,
                256,
            ),
        ] {
            let t = parse(p);
            assert_eq!(t.path(), p);
            assert_eq!(t.index(), index);
            assert_eq!(t.width(), width);
            match level {
                Some(l) => assert_eq!(t.kind(), TileKind::Hashes { level: l }),
                None => assert_eq!(t.kind(), TileKind::Entries),
            }
            assert_eq!(TilePath::from_tlog(&t.to_tlog()), Some(t));
        }
    }

    #[test]
    fn non_canonical_or_out_of_range_paths_are_refused() {
        for p in [
            "",
            "tile",
            "tile/0",
            "tile/0/",
            "tiles/0/000",
            "/tile/0/000",
            "tile/00/000",
            "tile/01/000",
            "tile/64/000",
            "tile/-1/000",
            "tile/+1/000",
            "tile/a/000",
            "tile/0/0",
            "tile/0/00",
            "tile/0/0000",
            "tile/0/x000/001",
            "tile/0/001/001",
            "tile/0/x001",
            "tile/0/x1/001",
            "tile/0/x001/x001",
            "tile/0/001/",
            "tile/0/001.p/0",
            "tile/0/001.p/256",
            "tile/0/001.p/01",
            "tile/0/001.p/",
            "tile/0/001.p/1/2",
            "tile/0/001.p",
            "tile/0/001.q/1",
            "tile/8/0/001",
            "tile/entries/01",
            "tile/Entries/001",
            "tile/entries/001.p/300",
            // u64::MAX + 1
            "tile/0/x018/x446/x744/x073/x709/x551/616",
            "tile/0/x001/x018/x446/x744/x073/x709/x551/615",
        ] {
            assert!(TilePath::parse(p).is_err(), "{p:?} was accepted");
        }
        let long = format!("tile/0/{}", "x001/".repeat(20));
        assert_eq!(
            TilePath::parse(&long).unwrap_err().reason,
            "the path is too long"
        );
    }

    proptest::proptest! {
        /// Every tile has one path, which parses back to it.
        #[test]
        fn any_tile_round_trips(level in 0u8..=63, index: u64, width in 1u32..=256, data: bool) {
            let t = if data {
                TilePath::entries(index, width)
            } else {
                TilePath::hashes(level, index, width)
            }
            .unwrap();
            proptest::prop_assert_eq!(TilePath::parse(&t.path()), Ok(t));
        }

        /// Whatever parses is written back byte for byte: one spelling per tile. The paths
        /// are assembled from canonical and near-canonical pieces, so that many parse.
        #[test]
        fn what_parses_is_canonical(
            level in proptest::sample::select(vec!["0", "00", "1", "01", "7", "63", "64", "entries", "x1", ""]),
            index in proptest::collection::vec(
                proptest::sample::select(vec!["000", "001", "999", "x000", "x001", "x999", "1", "01", "0001", "x01", ""]),
                1..8,
            ),
            width in proptest::sample::select(vec!["", ".p/0", ".p/1", ".p/01", ".p/255", ".p/256", ".p/", ".p/1/"]),
        ) {
            let s = format!("tile/{level}/{}{width}", index.join("/"));
            match TilePath::parse(&s) {
                Ok(t) => proptest::prop_assert_eq!(t.path(), s),
                Err(e) => proptest::prop_assert_eq!(e.path, s),
            }
        }
    }

    #[test]
    fn ranges_and_overflow() {
        let t = parse("tile/1/001.p/17");
        assert_eq!(t.start(), Some(65_536));
        assert_eq!(t.end(), Some((256 + 17) * 256));
        assert!(t.within(70_000) && t.within(69_888) && !t.within(69_887));
        let full = parse("tile/0/273");
        assert_eq!((full.start(), full.end()), (Some(69_888), Some(70_144)));
        assert!(!full.within(70_000));
        // Level 7 spans 2^56 entries a hash; level 8 and above pass u64.
        assert_eq!(parse("tile/7/000.p/1").end(), Some(1 << 56));
        assert_eq!(parse("tile/7/000").end(), None);
        assert_eq!(parse("tile/8/000.p/1").end(), None);
        assert!(!parse("tile/63/000.p/1").within(u64::MAX));
        assert_eq!(
            parse("tile/0/x018/x446/x744/x073/x709/x551/615").end(),
            None
        );
    }

    #[test]
    fn stored_hash_indexes_follow_tlog() {
        let t = parse("tile/1/000.p/3");
        let want: Vec<u64> = (0..3)
            .map(|i| tlog_tiles::stored_hash_index(8, i))
            .collect();
        assert_eq!(t.stored_hash_indexes(), want);
        assert!(parse("tile/entries/000").stored_hash_indexes().is_empty());
        assert_eq!(parse("tile/0/001").stored_hash_indexes().len(), 256);
    }

    /// The spec's example: a tree of 70,000 entries is 273 full level-0 tiles, a partial
    /// level-0 tile of width 112, one full level-1 tile, a partial level-1 tile of width 17
    /// and a partial level-2 tile of width 1; a tree of 256 is a full level-0 tile and a
    /// level-1 tile of width 1.
    #[test]
    fn tiles_of_the_spec_examples() {
        let tiles = tiles_of_tree(70_000);
        let full0 = tiles
            .iter()
            .filter(|t| t.level() == 0 && t.is_full())
            .count();
        assert_eq!(full0, 273);
        let rest: Vec<String> = tiles
            .iter()
            .filter(|t| t.level() > 0 || !t.is_full())
            .map(TilePath::path)
            .collect();
        assert_eq!(
            rest,
            [
                "tile/0/273.p/112",
                "tile/1/000",
                "tile/1/001.p/17",
                "tile/2/000.p/1"
            ]
        );
        assert!(tiles.iter().all(|t| t.within(70_000)));
        let small: Vec<String> = tiles_of_tree(256).iter().map(TilePath::path).collect();
        assert_eq!(small, ["tile/0/000", "tile/1/000.p/1"]);
        assert!(tiles_of_tree(0).is_empty());
        // The same lists as tlog_tiles computes from an empty tree.
        for size in [1, 255, 256, 257, 65_536, 70_000, 16_777_217] {
            let ours: Vec<TilePath> = tiles_of_tree(size);
            let theirs: Vec<TilePath> = tlog_tiles::Tile::new_tiles(TILE_HEIGHT, 0, size)
                .iter()
                .map(|t| TilePath::from_tlog(t).unwrap())
                .collect();
            assert_eq!(ours, theirs, "size {size}");
        }
    }

    #[test]
    fn bundles_round_trip_and_refuse_what_they_cannot_hold() {
        let leaves: Vec<Vec<u8>> = vec![b"a".to_vec(), Vec::new(), vec![7; 300]];
        let b = encode_bundle(leaves.iter().map(Vec::as_slice)).unwrap();
        assert_eq!(&b[..3], &[0, 1, b'a']);
        assert_eq!(&b[3..5], &[0, 0]);
        assert_eq!(&b[5..7], &[1, 44]);
        let back = decode_bundle(&b).unwrap();
        assert_eq!(back, leaves.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(
            decode_bundle(&b[..b.len() - 1]),
            Err(BundleError::Truncated { position: 2 })
        );
        assert_eq!(
            decode_bundle(&[0]),
            Err(BundleError::Truncated { position: 0 })
        );
        let edge = vec![0u8; MAX_BUNDLE_ENTRY_BYTES];
        assert_eq!(encode_bundle([edge.as_slice()]).unwrap().len(), 2 + 65_535);
        let over = vec![0u8; MAX_BUNDLE_ENTRY_BYTES + 1];
        assert_eq!(
            encode_bundle([b"x".as_slice(), over.as_slice()]),
            Err(BundleError::EntryTooLong {
                position: 1,
                len: 65_536
            })
        );
    }

    /// The longest frame a leaf puts around its envelope (the latest time, the largest
    /// index, a 44-character base64 `prev`).
    #[test]
    fn every_leaf_fits_a_bundle() {
        let latest = crate::time::Timestamp::parse("9999-12-31T23:59:59Z").expect("a valid time");
        let frame = crate::leaf::leaf_bytes(u64::MAX, latest, &"A".repeat(44), b"").len();
        assert!(
            frame <= MAX_LEAF_FRAME_BYTES,
            "a leaf frame is {frame} bytes"
        );
        assert!(MAX_ENVELOPE_BYTES + frame <= MAX_BUNDLE_ENTRY_BYTES);
    }

    #[test]
    fn tiles_grown_adds_exactly_what_a_smaller_tree_lacks() {
        use std::collections::BTreeSet;
        let all = |size: u64| -> BTreeSet<String> {
            let mut v: BTreeSet<String> = tiles_of_tree(size).iter().map(TilePath::path).collect();
            let full = u64::from(FULL_WIDTH);
            for i in 0..size.div_ceil(full) {
                let w = (size - i * full).min(full) as u32;
                v.insert(TilePath::entries(i, w).unwrap().path());
            }
            v
        };
        assert!(tiles_grown(5, 5).is_empty());
        assert!(tiles_grown(9, 5).is_empty());
        for (from, to) in [
            (0, 1),
            (0, 256),
            (1, 256),
            (255, 257),
            (256, 512),
            (300, 70_000),
            (65_535, 65_537),
            (0, 70_000),
        ] {
            let grown: BTreeSet<String> =
                tiles_grown(from, to).iter().map(TilePath::path).collect();
            // Everything the larger tree has that the smaller one did not is added...
            for p in all(to).difference(&all(from)) {
                assert!(grown.contains(p), "{from}..{to}: {p} missing");
            }
            // ...and nothing the larger tree does not have.
            for p in &grown {
                assert!(
                    all(to).contains(p),
                    "{from}..{to}: {p} is not a tile of {to}"
                );
            }
        }
        let p: Vec<String> = tiles_grown(255, 257).iter().map(TilePath::path).collect();
        assert_eq!(
            p,
            [
                "tile/entries/000",
                "tile/entries/001.p/1",
                "tile/0/000",
                "tile/0/001.p/1",
                "tile/1/000.p/1"
            ]
        );
    }
}
