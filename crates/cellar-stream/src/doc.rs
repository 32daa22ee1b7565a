//! A streaming document's checks (the one document type, `cellar_search::DocIn`, with a group)
//! and the one binary encoding of an entry (a document version or a tombstone) shared by the
//! write-ahead log, the memtable and the segments.
//!
//! ```text
//! entry = len u32 (whole entry, this field included) | kind u8 (1 put, 2 tombstone) | seq u64
//!       | group_len u16 | id_len u16 | group | id
//!       [put only]
//!       | text_len u32 | n_tokens u32 | dim u16 | n_meta u16 | text
//!       | tokens f16[n_tokens * dim] | pooled f16[dim] | meta*
//! meta  = key_len u16 | key | tag u8 (1 string, 2 int, 3 float, 4 bool, 5 list) | value
//!         (string: len u32 + UTF-8; int: i64; float: f64; bool: u8;
//!          list: count u32, then each string as len u32 + UTF-8)
//! ```
//! All integers little-endian. Vectors are stored as IEEE half floats, the layout the MaxSim
//! kernels of `cellar-core` read directly.

use std::borrow::Cow;
use std::collections::BTreeMap;

use cellar_core::store::MAX_TOKENS_PER_DOC;
use cellar_core::{CellarError, Result};
use cellar_search::doc::check_key;
use cellar_search::plan::flatten;
use cellar_search::vectors::mean_normalized;
use cellar_search::{DocIn, MetaValue, Metadata, QueryVectorsIn};
use half::f16;

/// Largest dimension of a stream's vectors (an entry holds it in 16 bits; an index's codecs take up to
/// `cellar_core::codec::MAX_DIM`).
pub const MAX_DIM: usize = 4096;
/// Largest encoded document (text, f16 vectors and metadata together).
pub const MAX_DOC_BYTES: usize = 4 << 20;

pub const KIND_PUT: u8 = 1;
pub const KIND_TOMBSTONE: u8 = 2;
/// Byte offset of `seq` inside an entry (patched when the log assigns it).
const SEQ_AT: usize = 5;
const FIXED_HEAD: usize = 4 + 1 + 8 + 2 + 2;

fn invalid(message: String) -> CellarError {
    CellarError::InvalidInput(message)
}

/// Stored vectors are f16: a value beyond its range would be stored as infinity.
fn check_finite(what: &str, values: &[f32]) -> Result<()> {
    match values.iter().position(|v| !half::f16::from_f32(*v).is_finite()) {
        Some(i) if values[i].is_finite() => Err(invalid(format!(
            "{what}: value {i} ({}) is outside the range of the f16 vectors a stream stores (+-{})",
            values[i],
            half::f16::MAX
        ))),
        Some(i) => Err(invalid(format!("{what}: value {i} is not finite"))),
        None => Ok(()),
    }
}

/// A document's or a query's pooled vector when it gives none: the one rule of every front end
/// (`cellar_search::vectors::mean_normalized`); zero when the mean is zero.
pub fn mean_or_zero(tokens: &[f32], dim: usize) -> Vec<f32> {
    mean_normalized(tokens, dim).unwrap_or_else(|| vec![0.0; dim])
}

/// A document's token vectors (`n * dim` values) and its pooled vector, if it gives one.
type Flat<'a> = (Cow<'a, [f32]>, Option<Cow<'a, [f32]>>);

/// Vectors checked against `dim` (at most `max_rows` token rows; `field` names them in errors):
/// JSON rows are read in place, the base64 forms decoded (`cellar_search::plan::flatten`). A
/// document's and a search's alike.
pub(crate) fn flat_vectors<'a>(
    vectors: &'a QueryVectorsIn,
    dim: usize,
    field: &str,
    max_rows: usize,
) -> Result<Flat<'a>> {
    if vectors.tokens_b64.is_some() || vectors.pooled_b64.is_some() {
        let flat = flatten(vectors.clone(), dim, field, max_rows)?;
        return Ok((Cow::Owned(flat.tokens), flat.pooled.map(Cow::Owned)));
    }
    if let Some(row) = vectors.tokens.iter().find(|row| row.len() != dim) {
        return Err(CellarError::WrongDimension { expected: dim, received: row.len() });
    }
    if let Some(pooled) = vectors.pooled.as_ref().filter(|p| p.len() != dim) {
        return Err(CellarError::WrongDimension { expected: dim, received: pooled.len() });
    }
    if vectors.tokens.len() > max_rows {
        return Err(invalid(format!(
            "{field}: {} token vectors; at most {max_rows} allowed",
            vectors.tokens.len()
        )));
    }
    let tokens = match vectors.tokens.as_slice() {
        [one] => Cow::Borrowed(one.as_slice()),
        rows => Cow::Owned(rows.concat()),
    };
    Ok((tokens, vectors.pooled.as_deref().map(Cow::Borrowed)))
}

/// The entry bytes (seq 0: the log assigns it with [`set_seq`]) of `doc` for a collection of
/// dimension `dim`, after every rule a document must pass before it is logged: the rules of
/// every document (`DocIn::check`: id, text, metadata), a group, no title (an entry has
/// none), token vectors of `dim` values in the range of f16, at most [`MAX_DOC_BYTES`]
/// encoded. `at` (`docs[3]`) is what errors name.
pub fn encode_doc(doc: &DocIn, dim: usize, at: &str) -> Result<Vec<u8>> {
    let group = doc.group.as_deref().ok_or_else(|| invalid(format!("{at}: the document has no group")))?;
    check_key("group", group)?;
    doc.check(at)?;
    if !doc.title.is_empty() {
        return Err(invalid(format!("{at}.title: a stream stores no title: put it in the text")));
    }
    let vectors = doc.vectors.as_ref().ok_or_else(|| invalid(format!("{at}: no vectors")))?;
    let (tokens, pooled) = flat_vectors(vectors, dim, &format!("{at}.vectors"), MAX_TOKENS_PER_DOC)?;
    let n_tokens = tokens.len() / dim.max(1);
    if n_tokens == 0 {
        return Err(invalid(format!("{at}: the document has no token vectors")));
    }
    check_finite("token vectors", &tokens)?;
    let pooled = match pooled {
        Some(pooled) => {
            check_finite("pooled vector", &pooled)?;
            pooled
        }
        None => Cow::Owned(mean_or_zero(&tokens, dim)),
    };
    let meta: usize = doc.metadata.0.iter().map(|(k, v)| 2 + k.len() + 1 + meta_value_len(v)).sum();
    let size =
        FIXED_HEAD + group.len() + doc.id.len() + 12 + doc.text.len() + 2 * dim * (n_tokens + 1) + meta;
    if size > MAX_DOC_BYTES {
        return Err(invalid(format!(
            "document {:?} is {size} bytes encoded, over the limit of {MAX_DOC_BYTES}",
            doc.id
        )));
    }
    let mut out = Vec::with_capacity(size);
    put_head(&mut out, KIND_PUT, group, &doc.id);
    out.extend_from_slice(&(doc.text.len() as u32).to_le_bytes());
    out.extend_from_slice(&(n_tokens as u32).to_le_bytes());
    out.extend_from_slice(&(dim as u16).to_le_bytes());
    out.extend_from_slice(&(doc.metadata.0.len() as u16).to_le_bytes());
    out.extend_from_slice(doc.text.as_bytes());
    push_f16(&mut out, &tokens);
    push_f16(&mut out, &pooled);
    for (key, value) in &doc.metadata.0 {
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        push_meta(&mut out, value);
    }
    finish_len(&mut out);
    debug_assert_eq!(out.len(), size);
    Ok(out)
}

/// A tombstone entry for (group, id), seq 0.
pub fn encode_tombstone(group: &str, id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIXED_HEAD + group.len() + id.len());
    put_head(&mut out, KIND_TOMBSTONE, group, id);
    finish_len(&mut out);
    out
}

/// Writes the sequence number into an encoded entry.
pub fn set_seq(entry: &mut [u8], seq: u64) {
    entry[SEQ_AT..SEQ_AT + 8].copy_from_slice(&seq.to_le_bytes());
}

fn put_head(out: &mut Vec<u8>, kind: u8, group: &str, id: &str) {
    out.extend_from_slice(&[0u8; 4]);
    out.push(kind);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(group.len() as u16).to_le_bytes());
    out.extend_from_slice(&(id.len() as u16).to_le_bytes());
    out.extend_from_slice(group.as_bytes());
    out.extend_from_slice(id.as_bytes());
}

fn finish_len(out: &mut [u8]) {
    let len = out.len() as u32;
    out[..4].copy_from_slice(&len.to_le_bytes());
}

fn push_f16(out: &mut Vec<u8>, values: &[f32]) {
    for v in values {
        out.extend_from_slice(&f16::from_f32(*v).to_le_bytes());
    }
}

fn meta_value_len(value: &MetaValue) -> usize {
    match value {
        MetaValue::Str(s) => 4 + s.len(),
        MetaValue::Int(_) | MetaValue::Float(_) => 8,
        MetaValue::Bool(_) => 1,
        MetaValue::List(l) => 4 + l.iter().map(|s| 4 + s.len()).sum::<usize>(),
    }
}

fn push_meta(out: &mut Vec<u8>, value: &MetaValue) {
    match value {
        MetaValue::Str(s) => {
            out.push(1);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        MetaValue::Int(i) => {
            out.push(2);
            out.extend_from_slice(&i.to_le_bytes());
        }
        MetaValue::Float(f) => {
            out.push(3);
            out.extend_from_slice(&f.to_le_bytes());
        }
        MetaValue::Bool(b) => {
            out.push(4);
            out.push(u8::from(*b));
        }
        MetaValue::List(l) => {
            out.push(5);
            out.extend_from_slice(&(l.len() as u32).to_le_bytes());
            for s in l {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
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
    /// f16 little-endian, `n_tokens * dim` values.
    pub tokens: &'a [u8],
    /// f16 little-endian, `dim` values.
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
        std::str::from_utf8(self.take(n)?).map_err(|_| "a string is not UTF-8".to_string())
    }
}

/// Length of the entry at the start of `bytes`, if its length field is there.
pub fn entry_len(bytes: &[u8]) -> Option<usize> {
    bytes.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize)
}

impl<'a> EntryView<'a> {
    /// [`EntryView::parse`] of an entry read from `path`: a bad one is `Corrupted` there.
    pub fn parse_at(path: &std::path::Path, bytes: &'a [u8]) -> Result<EntryView<'a>> {
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
                // Metadata is decoded (and checked) only when a filter or a hit needs it.
                view.meta = &bytes[c.at..];
            }
            other => return Err(format!("unknown entry kind {other}")),
        }
        Ok(view)
    }

    pub fn is_tombstone(&self) -> bool {
        self.kind == KIND_TOMBSTONE
    }

    /// Decodes the metadata fields (as stored: the rules of new metadata are not applied to
    /// what an older version stored).
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

    /// Token vectors as f32 (for `get`).
    pub fn tokens_f32(&self) -> Vec<f32> {
        f16_to_f32(self.tokens)
    }

    pub fn pooled_f32(&self) -> Vec<f32> {
        f16_to_f32(self.pooled)
    }
}

fn f16_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
}
