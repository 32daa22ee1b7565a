//! The payload of one write batch in the index's write-ahead log (`live/wal.log`, the log format
//! of `cellar_core::format::wal`): one log record per batch, so a batch is replayed whole or
//! not at all.
//!
//! ```text
//! batch = seq u64 | ops u32 | op*
//! op    = tag u8 (1 put, 2 delete, 3 put with metadata, 4 put in a group) | doc u32
//!         | put fields (tags 1, 3, 4)
//! put   = id str | title str | text str | n_tokens u32 | tokens bytes | pooled bytes
//!         | meta str (tags 3 and 4: the metadata as a JSON object, `{}` when none)
//!         | group str (tag 4 only: the document's group in a grouped index)
//! str   = len u32 | UTF-8;  bytes = len u32 | bytes          (all integers little-endian)
//! ```
//! `doc` is the internal id the write gave the document (a put) or the one it removes (a
//! delete); `tokens` are the document's token vectors as the index's codec encodes them and
//! `pooled` its pooled vector as f16, so replaying a batch gives the bytes that were searched.

use std::path::Path;
use std::sync::Arc;

use cellar_core::{CellarError, DocId, Result};

use crate::corpus::Document;
use crate::meta::Metadata;

/// Tag of a put in a batch (`docs/format/live.md`).
pub const OP_PUT: u8 = 1;
/// Tag of a delete.
pub const OP_DELETE: u8 = 2;
/// Tag of a put that carries metadata (a log without metadata is written as before it came).
pub const OP_PUT_META: u8 = 3;
/// Tag of a put of a document in a group (a grouped index's; it carries metadata too).
pub const OP_PUT_GROUP: u8 = 4;

/// A document written since the index was built, as searches read it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LiveDoc {
    pub id: DocId,
    pub doc: Document,
    pub n_tokens: u32,
    /// `n_tokens` vectors encoded by the index's codec.
    pub tokens: Vec<u8>,
    /// The pooled vector, f16 little-endian (as `pooled.bin` rows).
    pub pooled: Vec<u8>,
}

/// One change of a batch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LogOp {
    Put(Arc<LiveDoc>),
    Delete(DocId),
}

/// One acknowledged batch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LogBatch {
    pub seq: u64,
    pub ops: Vec<LogOp>,
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

impl LogBatch {
    pub fn encode(&self) -> Vec<u8> {
        // Sized up front (all but a document's metadata JSON): a batch of 256 documents is
        // hundreds of KiB, which growing from empty copied about twice over.
        let sized: usize = self
            .ops
            .iter()
            .map(|op| match op {
                LogOp::Put(doc) => {
                    let d = &doc.doc;
                    let keys =
                        d.id.len() + d.title.len() + d.text.len() + d.group.as_ref().map_or(0, String::len);
                    1 + 4 + 4 + 7 * 4 + keys + doc.tokens.len() + doc.pooled.len()
                }
                LogOp::Delete(_) => 1 + 4,
            })
            .sum();
        let mut out = Vec::with_capacity(12 + sized);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            match op {
                LogOp::Put(doc) => {
                    let tag = match (&doc.doc.group, doc.doc.metadata.is_empty()) {
                        (Some(_), _) => OP_PUT_GROUP,
                        (None, true) => OP_PUT,
                        (None, false) => OP_PUT_META,
                    };
                    out.push(tag);
                    out.extend_from_slice(&doc.id.0.to_le_bytes());
                    put_bytes(&mut out, doc.doc.id.as_bytes());
                    put_bytes(&mut out, doc.doc.title.as_bytes());
                    put_bytes(&mut out, doc.doc.text.as_bytes());
                    out.extend_from_slice(&doc.n_tokens.to_le_bytes());
                    put_bytes(&mut out, &doc.tokens);
                    put_bytes(&mut out, &doc.pooled);
                    if tag != OP_PUT {
                        let meta = serde_json::to_vec(&doc.doc.metadata).expect("metadata serializes");
                        put_bytes(&mut out, &meta);
                    }
                    if let Some(group) = &doc.doc.group {
                        put_bytes(&mut out, group.as_bytes());
                    }
                }
                LogOp::Delete(id) => {
                    out.push(OP_DELETE);
                    out.extend_from_slice(&id.0.to_le_bytes());
                }
            }
        }
        out
    }

    /// Parses a record's payload; `path` (the log) is what an error names.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<LogBatch> {
        let mut r = Cursor { bytes, at: 0, path };
        let seq = r.u64()?;
        let n = r.u32()? as usize;
        let mut ops = Vec::with_capacity(n.min(bytes.len()));
        for _ in 0..n {
            let tag = r.take(1)?[0];
            let id = DocId(r.u32()?);
            ops.push(match tag {
                OP_PUT | OP_PUT_META | OP_PUT_GROUP => {
                    let (doc_id, title, text) = (r.string()?, r.string()?, r.string()?);
                    let (n_tokens, tokens, pooled) = (r.u32()?, r.bytes()?.to_vec(), r.bytes()?.to_vec());
                    let metadata = match tag {
                        OP_PUT => Metadata::default(),
                        _ => {
                            let bytes = r.bytes()?;
                            serde_json::from_slice(bytes).map_err(|e| r.bad(format!("metadata: {e}")))?
                        }
                    };
                    let group = if tag == OP_PUT_GROUP { Some(r.string()?) } else { None };
                    let doc = Document { id: doc_id, title, text, metadata, group };
                    LogOp::Put(Arc::new(LiveDoc { id, doc, n_tokens, tokens, pooled }))
                }
                OP_DELETE => LogOp::Delete(id),
                other => return Err(r.bad(format!("unknown operation {other}"))),
            });
        }
        if r.at != bytes.len() {
            return Err(r.bad(format!("{} bytes after the last operation", bytes.len() - r.at)));
        }
        Ok(LogBatch { seq, ops })
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn bad(&self, detail: String) -> CellarError {
        CellarError::corrupted(
            self.path,
            0,
            format!("a write batch in the log: {detail} (at byte {})", self.at),
        )
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len());
        let end = end.ok_or_else(|| self.bad(format!("cut short reading {n} bytes")))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn string(&mut self) -> Result<String> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.bad("a string that is not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> LogBatch {
        let doc = LiveDoc {
            id: DocId(41),
            doc: Document {
                metadata: serde_json::from_str(r#"{"lang":"fr","year":2001}"#).unwrap(),
                ..Document::new("d-é", "T", "some text")
            },
            n_tokens: 2,
            tokens: vec![1, 2, 3, 4, 5, 6],
            pooled: vec![9, 8],
        };
        let plain = LiveDoc { id: DocId(42), doc: Document::new("p", "", "plain"), ..doc.clone() };
        let grouped = LiveDoc {
            id: DocId(43),
            doc: Document { group: Some("user-7".into()), ..plain.doc.clone() },
            ..doc.clone()
        };
        LogBatch {
            seq: 7,
            ops: vec![
                LogOp::Delete(DocId(3)),
                LogOp::Put(Arc::new(doc)),
                LogOp::Put(Arc::new(plain)),
                LogOp::Put(Arc::new(grouped)),
            ],
        }
    }

    #[test]
    fn a_batch_reads_back_as_written_and_every_cut_is_refused() {
        let path = Path::new("wal.log");
        let bytes = batch().encode();
        assert_eq!(LogBatch::decode(&bytes, path).unwrap(), batch());
        for cut in 0..bytes.len() {
            let err = LogBatch::decode(&bytes[..cut], path).unwrap_err();
            assert!(matches!(err, CellarError::Corrupted { .. }), "cut at {cut}: {err:?}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(LogBatch::decode(&longer, path).is_err());
        let mut unknown = bytes;
        unknown[12] = 9;
        assert!(LogBatch::decode(&unknown, path).unwrap_err().to_string().contains("unknown operation"));
    }

    /// Issue 16.3, a short pass: random mutations of a batch (bytes changed, lengths and counts
    /// set to extremes, cuts, additions) decode or are refused as `Corrupted`, never a panic or
    /// an allocation sized by a length field.
    #[test]
    fn mutated_batches_are_refused_or_read_never_a_panic() {
        use rand::{Rng, SeedableRng};
        let path = Path::new("wal.log");
        let bytes = batch().encode();
        let mut rng = rand::rngs::StdRng::seed_from_u64(164);
        for round in 0..20_000 {
            let mut mutated = bytes.clone();
            match round % 3 {
                0 => (0..rng.gen_range(1..4)).for_each(|_| {
                    let at = rng.gen_range(0..mutated.len());
                    mutated[at] = rng.gen();
                }),
                1 => {
                    let at = rng.gen_range(0..mutated.len() - 4);
                    let value = [u32::MAX, u32::MAX / 2, 1 << 20, 0][rng.gen_range(0..4)];
                    mutated[at..at + 4].copy_from_slice(&value.to_le_bytes());
                }
                _ => mutated.truncate(rng.gen_range(0..mutated.len())),
            }
            if let Err(e) = LogBatch::decode(&mutated, path) {
                assert!(matches!(e, CellarError::Corrupted { .. }), "{e:?}");
            }
        }
    }
}
