//! A streaming document, its validation, and the one binary encoding of an entry (a document
//! version or a tombstone) shared by the write-ahead log, the memtable and the segments.
//!
//! ```text
//! entry = len u32 (whole entry, this field included) | kind u8 (1 put, 2 tombstone) | seq u64
//!       | group_len u16 | id_len u16 | group | id
//!       [put only]
//!       | text_len u32 | n_tokens u32 | dim u16 | n_meta u16 | text
//!       | tokens f16[n_tokens * dim] | pooled f16[dim] | meta*
//! meta  = key_len u16 | key | tag u8 (1 string, 2 int, 3 float, 4 bool) | value
//!         (string: len u32 + UTF-8; int: i64; float: f64; bool: u8)
//! ```
//! All integers little-endian. Vectors are stored as IEEE half floats, the layout the MaxSim
//! kernels of `cellar-core` read directly.

use std::collections::BTreeMap;

use cellar_core::{CellarError, Result};
use half::f16;

/// Longest group or document id, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest text, in bytes.
pub const MAX_TEXT_BYTES: usize = 1 << 20;
/// Most token vectors per document.
pub const MAX_TOKENS: usize = 4096;
/// Largest dimension of a collection's vectors.
pub const MAX_DIM: usize = 4096;
/// Most metadata fields per document, and the longest key and string value.
pub const MAX_META_FIELDS: usize = 64;
pub const MAX_META_KEY_BYTES: usize = 128;
pub const MAX_META_STRING_BYTES: usize = 64 << 10;
/// Largest encoded document (text, f16 vectors and metadata together).
pub const MAX_DOC_BYTES: usize = 4 << 20;

pub const KIND_PUT: u8 = 1;
pub const KIND_TOMBSTONE: u8 = 2;
/// Byte offset of `seq` inside an entry (patched when the log assigns it).
const SEQ_AT: usize = 5;
const FIXED_HEAD: usize = 4 + 1 + 8 + 2 + 2;

/// A metadata value: a scalar.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl MetaValue {
    /// Equality as filters see it: an int and a float compare by value.
    pub fn matches(&self, other: &MetaValue) -> bool {
        match (self, other) {
            (MetaValue::Int(a), MetaValue::Float(b)) | (MetaValue::Float(b), MetaValue::Int(a)) => {
                (*a as f64) == *b
            }
            _ => self == other,
        }
    }
}

/// One document as the caller gives it, vectors included (`tokens` is `n_tokens * dim` f32,
/// row-major). `pooled` is the mean of the token vectors, L2-normalised, when `None`.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamDoc {
    pub group: String,
    pub id: String,
    pub text: String,
    pub tokens: Vec<f32>,
    pub n_tokens: usize,
    pub pooled: Option<Vec<f32>>,
    pub metadata: BTreeMap<String, MetaValue>,
}

fn invalid(message: String) -> CellarError {
    CellarError::InvalidInput(message)
}

/// Checks a group or document id.
pub fn check_key(what: &str, key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(invalid(format!("the {what} is empty")));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(invalid(format!("the {what} is {} bytes, over the limit of {MAX_KEY_BYTES}", key.len())));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid(format!("the {what} {key:?} holds a control character")));
    }
    Ok(())
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

fn check_metadata(metadata: &BTreeMap<String, MetaValue>) -> Result<()> {
    if metadata.len() > MAX_META_FIELDS {
        return Err(invalid(format!(
            "{} metadata fields, over the limit of {MAX_META_FIELDS}",
            metadata.len()
        )));
    }
    for (key, value) in metadata {
        if key.is_empty() || key.len() > MAX_META_KEY_BYTES {
            return Err(invalid(format!("metadata key {key:?}: 1 to {MAX_META_KEY_BYTES} bytes")));
        }
        match value {
            MetaValue::Str(s) if s.len() > MAX_META_STRING_BYTES => {
                return Err(invalid(format!("metadata {key:?}: string over {MAX_META_STRING_BYTES} bytes")));
            }
            MetaValue::Float(f) if !f.is_finite() => {
                return Err(invalid(format!("metadata {key:?}: not a finite number")));
            }
            _ => {}
        }
    }
    Ok(())
}

impl StreamDoc {
    /// Every rule a document must pass before it is logged, against the collection's `dim`.
    pub fn validate(&self, dim: usize) -> Result<()> {
        check_key("group", &self.group)?;
        check_key("document id", &self.id)?;
        if self.text.len() > MAX_TEXT_BYTES {
            return Err(invalid(format!(
                "document {:?}: text of {} bytes is over the limit of {MAX_TEXT_BYTES}",
                self.id,
                self.text.len()
            )));
        }
        if self.n_tokens == 0 || self.n_tokens > MAX_TOKENS {
            return Err(invalid(format!(
                "document {:?}: {} token vectors; 1 to {MAX_TOKENS} allowed",
                self.id, self.n_tokens
            )));
        }
        if self.tokens.len() != self.n_tokens * dim {
            let received = self.tokens.len() / self.n_tokens;
            return Err(CellarError::WrongDimension { expected: dim, received });
        }
        check_finite("token vectors", &self.tokens)?;
        if let Some(pooled) = &self.pooled {
            if pooled.len() != dim {
                return Err(CellarError::WrongDimension { expected: dim, received: pooled.len() });
            }
            check_finite("pooled vector", pooled)?;
        }
        check_metadata(&self.metadata)?;
        let size = self.encoded_len(dim);
        if size > MAX_DOC_BYTES {
            return Err(invalid(format!(
                "document {:?} is {size} bytes encoded, over the limit of {MAX_DOC_BYTES}",
                self.id
            )));
        }
        Ok(())
    }

    fn encoded_len(&self, dim: usize) -> usize {
        let meta: usize = self.metadata.iter().map(|(k, v)| 2 + k.len() + 1 + meta_value_len(v)).sum();
        FIXED_HEAD
            + self.group.len()
            + self.id.len()
            + 12
            + self.text.len()
            + 2 * dim * (self.n_tokens + 1)
            + meta
    }

    /// The pooled vector: the given one, or the normalised mean of the token vectors.
    pub fn pooled_or_mean(&self, dim: usize) -> Vec<f32> {
        if let Some(pooled) = &self.pooled {
            return pooled.clone();
        }
        let mut mean = vec![0f32; dim];
        for row in self.tokens.chunks_exact(dim) {
            mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
        }
        let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            mean.iter_mut().for_each(|v| *v /= norm);
        }
        mean
    }

    /// The entry bytes of this document (seq 0: the log assigns it with [`set_seq`]). Call
    /// [`StreamDoc::validate`] first.
    pub fn encode(&self, dim: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len(dim));
        put_head(&mut out, KIND_PUT, &self.group, &self.id);
        out.extend_from_slice(&(self.text.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.n_tokens as u32).to_le_bytes());
        out.extend_from_slice(&(dim as u16).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u16).to_le_bytes());
        out.extend_from_slice(self.text.as_bytes());
        push_f16(&mut out, &self.tokens);
        push_f16(&mut out, &self.pooled_or_mean(dim));
        for (key, value) in &self.metadata {
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
            push_meta(&mut out, value);
        }
        finish_len(&mut out);
        out
    }
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

    /// Decodes the metadata fields.
    pub fn metadata(&self) -> std::result::Result<BTreeMap<String, MetaValue>, String> {
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
                tag => return Err(format!("unknown metadata tag {tag}")),
            };
            out.insert(key, value);
        }
        if c.at != self.meta.len() {
            return Err("bytes left over after the metadata".into());
        }
        Ok(out)
    }

    /// The metadata value under `key`, without decoding the others' strings.
    pub fn meta_get(&self, key: &str) -> Option<MetaValue> {
        self.metadata().ok()?.remove(key)
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
