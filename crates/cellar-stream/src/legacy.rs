//! Streaming collections of the first format (`stream-v1`, `docs/format/stream.md`), read once
//! to be migrated into a grouped index (`migrate`), never written: `stream.json` and
//! `MANIFEST.json`, the `CELLAR-G` segments (one checksummed extent per group), and the log,
//! whose records are entries (`EntryView`). Every byte is checked as the first engine checked
//! it; a damaged file stops the migration, which then changes nothing.
//!
//! ```text
//! entry = len u32 | kind u8 (1 put, 2 tombstone) | seq u64 | group_len u16 | id_len u16
//!       | group | id  [put: | text_len u32 | n_tokens u32 | dim u16 | n_meta u16 | text
//!       | tokens f16[n_tokens * dim] | pooled f16[dim] | meta*]
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cellar_core::format::fsio::{sync_dir, DirLock};
use cellar_core::format::versioned::{parse_versioned_json, VersionRange};
use cellar_core::{CellarError, IoContext, Result};
use cellar_search::{DocIn, MetaValue, Metadata, QueryVectorsIn, WriteOp, WriteRequest};
use half::f16;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub const SETTINGS_FILE: &str = "stream.json";
pub const MANIFEST_FILE: &str = "MANIFEST.json";
pub const WAL_FILE: &str = "wal.log";
pub const MANIFEST_VERSION: u32 = 1;
/// The field of both JSON files read first, on its own.
pub const VERSION_FIELD: &str = "version";
/// The versions of `stream.json` and `MANIFEST.json` this build reads.
pub const READABLE_VERSIONS: VersionRange = VersionRange::only(MANIFEST_VERSION);
pub const SEGMENT_MAGIC: [u8; 8] = *b"CELLAR-G";
pub const SEGMENT_VERSION: u32 = 1;
pub const SEGMENT_READABLE_VERSIONS: VersionRange = VersionRange::only(SEGMENT_VERSION);
pub const PAGE: u64 = 4096;
/// (name, offset, size) of every field of a segment's header, in order.
pub const SEGMENT_HEADER_FIELDS: [(&str, usize, usize); 11] = [
    ("magic", 0, 8),
    ("version", 8, 4),
    ("dim", 12, 4),
    ("n_groups", 16, 8),
    ("n_entries", 24, 8),
    ("min_seq", 32, 8),
    ("max_seq", 40, 8),
    ("dir_offset", 48, 8),
    ("dir_len", 56, 8),
    ("dir_crc32c", 64, 4),
    ("header_crc32c", 68, 4),
];
const HEADER_USED: usize = 72;
pub const KIND_PUT: u8 = 1;
pub const KIND_TOMBSTONE: u8 = 2;

/// Where header field `name` starts.
pub fn header_field(name: &str) -> usize {
    SEGMENT_HEADER_FIELDS.iter().find(|f| f.0 == name).expect("segment header field name").1
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Settings {
    pub version: u32,
    /// Dimension of token and pooled vectors.
    pub dim: usize,
    #[serde(default)]
    pub encoder: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SegmentRef {
    pub file: String,
    pub min_seq: u64,
    pub max_seq: u64,
    pub entries: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestV1 {
    pub version: u32,
    /// Live segments, oldest first.
    pub segments: Vec<SegmentRef>,
    /// Every log record with a sequence number up to this one is in a segment.
    pub flushed_seq: u64,
    pub next_segment: u64,
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CellarError::io(path, e)),
    };
    parse_versioned_json(path, &bytes, VERSION_FIELD, READABLE_VERSIONS).map(Some)
}

impl Settings {
    pub fn load(dir: &Path) -> Result<Option<Settings>> {
        read_json(&dir.join(SETTINGS_FILE))
    }
}

impl ManifestV1 {
    pub fn load(dir: &Path) -> Result<ManifestV1> {
        let manifest: Option<ManifestV1> = read_json(&dir.join(MANIFEST_FILE))?;
        Ok(manifest.unwrap_or(ManifestV1 {
            version: MANIFEST_VERSION,
            next_segment: 1,
            ..Default::default()
        }))
    }
}

/// File name of segment number `n`.
pub fn segment_file(n: u64) -> String {
    format!("seg-{n:08}.seg")
}

/// Whether `dir` holds a collection of the first format.
pub fn is_legacy(dir: &Path) -> bool {
    dir.join(SETTINGS_FILE).is_file()
}

/// A parsed entry borrowing its bytes; vectors stay f16.
#[derive(Clone, Copy, Debug)]
pub struct EntryView<'a> {
    pub kind: u8,
    pub seq: u64,
    pub group: &'a str,
    pub id: &'a str,
    pub text: &'a str,
    pub n_tokens: usize,
    pub dim: usize,
    pub tokens: &'a [u8],
    pub pooled: &'a [u8],
    n_meta: usize,
    meta: &'a [u8],
}

/// Reads fields off a byte slice; every short read is an error, never a panic.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("entry cut short at byte {} (needs {n} more)", self.at))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> std::result::Result<usize, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as usize)
    }
    fn u32(&mut self) -> std::result::Result<usize, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")) as usize)
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn str(&mut self, n: usize) -> std::result::Result<&'a str, String> {
        std::str::from_utf8(self.take(n)?).map_err(|_| "string is not UTF-8".to_string())
    }
}

/// The length field of the entry starting `bytes`.
pub fn entry_len(bytes: &[u8]) -> Option<usize> {
    bytes.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize)
}

impl<'a> EntryView<'a> {
    pub fn parse_at(path: &Path, bytes: &'a [u8]) -> Result<EntryView<'a>> {
        EntryView::parse(bytes).map_err(|detail| CellarError::corrupted(path, 0, detail))
    }

    /// Parses exactly one entry spanning all of `bytes`; the error says what is wrong.
    pub fn parse(bytes: &'a [u8]) -> std::result::Result<EntryView<'a>, String> {
        let mut c = Cursor { bytes, at: 0 };
        if c.u32()? != bytes.len() {
            return Err("entry length field disagrees with its extent".into());
        }
        let kind = c.u8()?;
        let seq = c.u64()?;
        let (group_len, id_len) = (c.u16()?, c.u16()?);
        let (group, id) = (c.str(group_len)?, c.str(id_len)?);
        let mut view = EntryView {
            kind,
            seq,
            group,
            id,
            text: "",
            n_tokens: 0,
            dim: 0,
            tokens: &[],
            pooled: &[],
            n_meta: 0,
            meta: &[],
        };
        match kind {
            KIND_TOMBSTONE => {}
            KIND_PUT => {
                let (text_len, n_tokens) = (c.u32()?, c.u32()?);
                let (dim, n_meta) = (c.u16()?, c.u16()?);
                view.text = c.str(text_len)?;
                view.tokens = c.take(n_tokens * dim * 2)?;
                view.pooled = c.take(dim * 2)?;
                (view.n_tokens, view.dim, view.n_meta) = (n_tokens, dim, n_meta);
                view.meta = &bytes[c.at..];
                view.metadata()?;
            }
            other => return Err(format!("unknown entry kind {other}")),
        }
        Ok(view)
    }

    pub fn is_tombstone(&self) -> bool {
        self.kind == KIND_TOMBSTONE
    }

    /// Decodes the metadata fields, as stored.
    pub fn metadata(&self) -> std::result::Result<Metadata, String> {
        let mut c = Cursor { bytes: self.meta, at: 0 };
        let mut out = BTreeMap::new();
        for _ in 0..self.n_meta {
            let key_len = c.u16()?;
            let key = c.str(key_len)?.to_string();
            let value = match c.u8()? {
                1 => {
                    let n = c.u32()?;
                    MetaValue::Str(c.str(n)?.to_string())
                }
                2 => MetaValue::Int(c.u64()? as i64),
                3 => MetaValue::Float(f64::from_bits(c.u64()?)),
                4 => MetaValue::Bool(c.u8()? != 0),
                5 => {
                    let n = c.u32()?;
                    let mut list = Vec::with_capacity(n.min(c.bytes.len()));
                    for _ in 0..n {
                        let len = c.u32()?;
                        list.push(c.str(len)?.to_string());
                    }
                    MetaValue::List(list)
                }
                tag => return Err(format!("unknown metadata tag {tag}")),
            };
            out.insert(key, value);
        }
        if c.at != self.meta.len() {
            return Err("bytes left over after the metadata".into());
        }
        Ok(Metadata(out))
    }

    /// The document this put stores, as a write takes it (vectors from f16, exactly).
    pub fn to_doc(&self) -> std::result::Result<DocIn, String> {
        let f32s = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
        };
        let tokens = f32s(self.tokens).chunks(self.dim.max(1)).map(<[f32]>::to_vec).collect();
        Ok(DocIn {
            id: self.id.to_string(),
            group: Some(self.group.to_string()),
            text: self.text.to_string(),
            metadata: self.metadata()?,
            vectors: Some(QueryVectorsIn { tokens, pooled: Some(f32s(self.pooled)), ..Default::default() }),
            ..DocIn::default()
        })
    }
}

/// The entries of one log record (`count u32 | entry*`), each parsed once to check it.
pub fn split_record(payload: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let count = entry_len(payload).ok_or("no entry count")?;
    let mut rest = &payload[4..];
    // Not `with_capacity(count)`: a record whose checksum matches can still say 4 billion.
    let mut out = Vec::new();
    for _ in 0..count {
        let len = entry_len(rest).filter(|&l| l >= 4 && l <= rest.len()).ok_or("entry cut short")?;
        EntryView::parse(&rest[..len])?;
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return Err("bytes after the last entry".into());
    }
    Ok(out)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// A segment file read whole: its dimension and every group's entries, each extent checked
/// against its checksum and its entries parsed.
pub struct SegmentV1 {
    pub dim: usize,
    /// Per group (any order), the extent's bytes and its entries' ranges in them.
    pub groups: Vec<(String, Vec<u8>, Vec<std::ops::Range<usize>>)>,
}

impl SegmentV1 {
    /// Reads the segment at `path`: version first (a newer one is `Incompatible`), then the
    /// header and directory checksums, then every extent.
    pub fn read(path: &Path) -> Result<SegmentV1> {
        let bytes = std::fs::read(path).at(path)?;
        let len = bytes.len() as u64;
        let version_at = header_field("version");
        if bytes.len() < version_at + 4 || bytes[..version_at] != SEGMENT_MAGIC {
            return Err(CellarError::corrupted(path, 0, "not a Cellar segment (bad magic)"));
        }
        SEGMENT_READABLE_VERSIONS.check(path, le_u32(&bytes, version_at))?;
        if len < PAGE {
            return Err(CellarError::corrupted(path, 0, "shorter than its header page"));
        }
        let h = &bytes[..HEADER_USED];
        let crc_at = header_field("header_crc32c");
        if le_u32(h, crc_at) != crc32c::crc32c(&h[..crc_at]) {
            return Err(CellarError::corrupted(path, crc_at as u64, "header checksum mismatch"));
        }
        let dir_at = header_field("dir_offset");
        let (dir_offset, dir_len) = (le_u64(h, dir_at), le_u64(h, header_field("dir_len")));
        if dir_offset.checked_add(dir_len) != Some(len) {
            return Err(CellarError::corrupted(path, dir_at as u64, "directory does not end the file"));
        }
        let dir = &bytes[dir_offset as usize..];
        if crc32c::crc32c(dir) != le_u32(h, header_field("dir_crc32c")) {
            return Err(CellarError::corrupted(path, dir_offset, "group directory checksum mismatch"));
        }
        let mut groups = Vec::new();
        let mut at = 0usize;
        while at < dir.len() {
            let bad = |detail: &str| CellarError::corrupted(path, dir_offset + at as u64, detail.to_string());
            let group_len = dir.get(at..at + 2).ok_or_else(|| bad("cut short"))?;
            let group_len = u16::from_le_bytes(group_len.try_into().expect("2")) as usize;
            let end = at + 2 + group_len + 24;
            let rec = dir.get(at + 2..end).ok_or_else(|| bad("cut short"))?;
            let group = std::str::from_utf8(&rec[..group_len]).map_err(|_| bad("group is not UTF-8"))?;
            let f = &rec[group_len..];
            let (offset, len, count, crc) = (le_u64(f, 0), le_u64(f, 8), le_u32(f, 16), le_u32(f, 20));
            let extent = offset
                .checked_add(len)
                .filter(|e| *e <= dir_offset)
                .map(|e| bytes[offset as usize..e as usize].to_vec())
                .ok_or_else(|| bad("extent beyond the directory"))?;
            if crc32c::crc32c(&extent) != crc {
                return Err(CellarError::corrupted(
                    path,
                    offset,
                    format!("group {group:?}: extent checksum mismatch"),
                ));
            }
            let mut entries = Vec::new();
            let mut pos = 0usize;
            while entries.len() < count as usize {
                let n = entry_len(&extent[pos..]).filter(|n| *n >= 4 && pos + n <= extent.len());
                let n =
                    n.ok_or_else(|| CellarError::corrupted(path, offset + pos as u64, "entry cut short"))?;
                EntryView::parse(&extent[pos..pos + n])
                    .map_err(|d| CellarError::corrupted(path, offset + pos as u64, d))?;
                entries.push(pos..pos + n);
                pos += n;
            }
            groups.push((group.to_string(), extent, entries));
            at = end;
        }
        Ok(SegmentV1 { dim: le_u32(h, header_field("dim")) as usize, groups })
    }
}

/// What a first-format collection holds: its dimension and the newest live version of every
/// (group, id), read from its segments and its log.
pub struct Contents {
    pub dim: usize,
    pub docs: Vec<DocIn>,
    /// Entries read (versions, tombstones) from segments and log.
    pub entries: u64,
}

/// Reads the collection in `dir` whole (newest sequence number wins; tombstones hide).
pub fn read(dir: &Path) -> Result<Contents> {
    let settings = Settings::load(dir)?
        .ok_or_else(|| CellarError::NotFound(format!("no streaming collection at {}", dir.display())))?;
    let manifest = ManifestV1::load(dir)?;
    let mut newest: HashMap<(String, String), (u64, Option<DocIn>)> = HashMap::new();
    let mut entries = 0u64;
    let mut offer = |view: &EntryView<'_>, path: &Path| -> Result<()> {
        entries += 1;
        let key = (view.group.to_string(), view.id.to_string());
        if newest.get(&key).is_some_and(|(seq, _)| *seq >= view.seq) {
            return Ok(());
        }
        let doc = if view.is_tombstone() {
            None
        } else {
            if view.dim != settings.dim {
                let detail = format!(
                    "document {:?} has dim {} in a collection of dim {}",
                    view.id, view.dim, settings.dim
                );
                return Err(CellarError::corrupted(path, 0, detail));
            }
            Some(view.to_doc().map_err(|d| CellarError::corrupted(path, 0, d))?)
        };
        newest.insert(key, (view.seq, doc));
        Ok(())
    };
    for segment in &manifest.segments {
        let path = dir.join(&segment.file);
        let read = SegmentV1::read(&path)?;
        if read.dim != settings.dim {
            let detail = format!("segment of dim {} in a collection of dim {}", read.dim, settings.dim);
            return Err(CellarError::corrupted(&path, header_field("dim") as u64, detail));
        }
        for (_, extent, ranges) in &read.groups {
            for range in ranges {
                offer(&EntryView::parse_at(&path, &extent[range.clone()])?, &path)?;
            }
        }
    }
    let wal = dir.join(WAL_FILE);
    cellar_core::format::wal::Wal::read(&wal, |payload| {
        let records = split_record(payload)
            .map_err(|d| CellarError::corrupted(&wal, 0, format!("a log record: {d}")))?;
        for entry in records {
            let view = EntryView::parse_at(&wal, entry)?;
            if view.seq > manifest.flushed_seq {
                offer(&view, &wal)?;
            }
        }
        Ok(())
    })?;
    let mut live: Vec<((String, String), DocIn)> =
        newest.into_iter().filter_map(|(k, (_, doc))| doc.map(|d| (k, d))).collect();
    live.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Contents { dim: settings.dim, docs: live.into_iter().map(|(_, d)| d).collect(), entries })
}

/// Documents a migration writes per batch (one log record each).
const MIGRATE_BATCH: usize = 256;

/// What a migration did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Migrated {
    /// Live documents carried over, and the entries (versions, tombstones) they were read from.
    pub docs: usize,
    pub entries: u64,
}

/// Where a migration builds the new collection, beside the old one.
fn staging(dir: &Path, suffix: &str) -> Result<PathBuf> {
    let name = dir
        .file_name()
        .ok_or_else(|| CellarError::invalid(format!("{}: no directory name", dir.display())))?;
    Ok(dir.with_file_name(format!(".{}.{suffix}", name.to_string_lossy())))
}

/// Migrates the first-format collection in `dir` into a grouped index in its place, losing
/// nothing: every live document (its text, metadata and vectors, exactly: f16 both ways) is
/// written to a new index beside it, flushed, and then the two directories are swapped by
/// renames; a crash before the swap leaves the old collection as it was (the next migration
/// starts again), a crash between the renames is finished by the next open (`finish_migration`).
/// `create` makes the new, empty grouped index of a dimension (the collection's own rules).
pub fn migrate(
    dir: &Path,
    create: &dyn Fn(&Path, usize) -> Result<cellar_search::Index>,
) -> Result<Migrated> {
    let lock = DirLock::exclusive(dir, "streaming collection")?;
    let contents = read(dir)?;
    let new = staging(dir, "migrating")?;
    if new.exists() {
        std::fs::remove_dir_all(&new).at(&new)?;
    }
    let index = create(&new, contents.dim)?;
    for chunk in contents.docs.chunks(MIGRATE_BATCH) {
        index.write(WriteRequest { ops: chunk.iter().cloned().map(WriteOp::Put).collect() })?;
    }
    index.flush()?;
    drop(index);
    let old = staging(dir, "v1")?;
    drop(lock);
    std::fs::rename(dir, &old).at(dir)?;
    std::fs::rename(&new, dir).at(&new)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    std::fs::remove_dir_all(&old).at(&old)?;
    Ok(Migrated { docs: contents.docs.len(), entries: contents.entries })
}

/// Finishes a migration a crash cut between its two renames (`dir` gone, the new collection
/// and the old one beside it); nothing to do otherwise.
pub fn finish_migration(dir: &Path) -> Result<()> {
    let (new, old) = (staging(dir, "migrating")?, staging(dir, "v1")?);
    if !dir.exists() && old.exists() && new.join(cellar_search::config::CONFIG_FILE).is_file() {
        std::fs::rename(&new, dir).at(&new)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
    }
    if dir.exists() && old.exists() && !is_legacy(dir) {
        std::fs::remove_dir_all(&old).at(&old)?;
    }
    Ok(())
}
