//! A folder of precomputed embeddings, the input of `cellar index --vectors DIR`
//! (`docs/embeddings.md`):
//!
//! ```text
//! DIR/corpus.jsonl      one BEIR corpus line per document, in order: "_id", optional "title"/"text"
//!                       and "metadata"
//! DIR/doclens.N.json    a JSON list: the token count of each document of shard N (N = 0, 1, ...)
//! DIR/embeddings.N.npy  shard N's token vectors, float32 or float16, C order, shape
//!                       (sum of its doclens, dim): its documents' tokens one after another
//! DIR/pooled.N.npy      optional (for every shard or none): shape (documents of shard N, dim)
//! ```
//!
//! [`EmbeddingsDir::open`] checks the whole layout (every header, shape and count, and that the
//! corpus has one line per document) before anything is read further; [`EmbeddingsDir::docs`]
//! then streams one document at a time. [`export`] writes an index's own vectors in this layout.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId, IoContext, Result};

use crate::build::EmbeddedDoc;
use crate::corpus::CorpusReader;
use crate::index::{Index, OpenOptions, VECTORS_DIR};

pub const CORPUS_FILE: &str = "corpus.jsonl";

/// The element type of an `.npy` array this reader takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpyDtype {
    F32,
    F16,
}

impl NpyDtype {
    fn bytes(self) -> usize {
        match self {
            NpyDtype::F32 => 4,
            NpyDtype::F16 => 2,
        }
    }
}

/// A 2-D `.npy` array's header: where its data starts, its element type and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    pub data_offset: u64,
    pub dtype: NpyDtype,
    pub rows: usize,
    pub cols: usize,
}

/// Reads and checks the header of `path` (NumPy format versions 1 to 3).
pub fn read_npy_header(path: &Path) -> Result<NpyHeader> {
    let mut file = File::open(path).at(path)?;
    let bad = |detail: String| CellarError::invalid(format!("{}: {detail}", path.display()));
    let mut lead = [0u8; 10];
    file.read_exact(&mut lead).map_err(|_| bad("too short for a .npy file".into()))?;
    if &lead[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file (no \\x93NUMPY magic)".into()));
    }
    let (len, start) = match lead[6] {
        1 => (u16::from_le_bytes([lead[8], lead[9]]) as usize, 10),
        2 | 3 => {
            let mut more = [0u8; 2];
            file.read_exact(&mut more).map_err(|_| bad("truncated header".into()))?;
            (u32::from_le_bytes([lead[8], lead[9], more[0], more[1]]) as usize, 12)
        }
        v => return Err(bad(format!(".npy format version {v} is not supported (1 to 3 are)"))),
    };
    if len > 1 << 20 {
        return Err(bad(format!("a header of {len} bytes")));
    }
    let mut header = vec![0u8; len];
    file.read_exact(&mut header).map_err(|_| bad("truncated header".into()))?;
    let header = String::from_utf8_lossy(&header);
    let field = |name: &str| -> Result<String> {
        let key = format!("'{name}':");
        let at = header.find(&key).ok_or_else(|| bad(format!("the header has no {name:?}")))?;
        Ok(header[at + key.len()..].trim_start().to_string())
    };
    let descr = field("descr")?;
    let dtype = if descr.starts_with("'<f4'") || descr.starts_with("'float32'") {
        NpyDtype::F32
    } else if descr.starts_with("'<f2'") || descr.starts_with("'float16'") {
        NpyDtype::F16
    } else {
        let shown = descr.split(',').next().unwrap_or_default();
        return Err(bad(format!(
            "dtype {shown}: embeddings must be little-endian float32 ('<f4') or float16 ('<f2'); convert with .astype(np.float32)"
        )));
    };
    if field("fortran_order")?.starts_with("True") {
        return Err(bad("Fortran order: save a C-ordered array (np.ascontiguousarray)".into()));
    }
    let shape = field("shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("unreadable shape".into()))?;
    let dims: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().map_err(|_| bad(format!("unreadable shape ({inner})"))))
        .collect::<Result<_>>()?;
    let [rows, cols] = dims[..] else {
        return Err(bad(format!("shape ({inner}): a 2-D array (rows, dim) is needed")));
    };
    let data_offset = (start + len) as u64;
    let expected = data_offset + (rows * cols * dtype.bytes()) as u64;
    let actual = file.metadata().at(path)?.len();
    if actual != expected {
        return Err(bad(format!("{actual} bytes, but a ({rows}, {cols}) array takes {expected}")));
    }
    Ok(NpyHeader { data_offset, dtype, rows, cols })
}

/// One shard: its token counts and arrays.
#[derive(Clone, Debug)]
struct Shard {
    doclens: Vec<usize>,
    embeddings: (PathBuf, NpyHeader),
    pooled: Option<(PathBuf, NpyHeader)>,
}

/// A checked embeddings folder.
#[derive(Clone, Debug)]
pub struct EmbeddingsDir {
    dir: PathBuf,
    shards: Vec<Shard>,
    dim: usize,
    docs: usize,
}

impl EmbeddingsDir {
    /// Checks the layout: shards numbered from 0 without gaps, each shard's doclens summing to
    /// its embeddings' rows (every count at least 1), one dimension throughout, pooled arrays for
    /// all shards or none with a row per document, and a corpus line per document.
    pub fn open(dir: &Path) -> Result<EmbeddingsDir> {
        let bad = |detail: String| CellarError::invalid(format!("{}: {detail}", dir.display()));
        if !dir.is_dir() {
            return Err(bad("no such folder of embeddings".into()));
        }
        let mut shards = Vec::new();
        while dir.join(format!("embeddings.{}.npy", shards.len())).is_file() {
            let n = shards.len();
            let path = dir.join(format!("embeddings.{n}.npy"));
            let header = read_npy_header(&path)?;
            let doclens = read_doclens(&dir.join(format!("doclens.{n}.json")))?;
            let tokens: usize = doclens.iter().sum();
            if tokens != header.rows {
                return Err(bad(format!(
                    "doclens.{n}.json counts {tokens} tokens but embeddings.{n}.npy holds {} rows",
                    header.rows
                )));
            }
            let pooled_path = dir.join(format!("pooled.{n}.npy"));
            let pooled = if pooled_path.is_file() {
                let pooled = read_npy_header(&pooled_path)?;
                if pooled.rows != doclens.len() || pooled.cols != header.cols {
                    return Err(bad(format!(
                        "pooled.{n}.npy is ({}, {}) but shard {n} has {} documents of dimension {}",
                        pooled.rows,
                        pooled.cols,
                        doclens.len(),
                        header.cols
                    )));
                }
                Some((pooled_path, pooled))
            } else {
                None
            };
            shards.push(Shard { doclens, embeddings: (path, header), pooled });
        }
        let Some(first) = shards.first() else {
            return Err(bad("no embeddings.0.npy (docs/embeddings.md describes the layout)".into()));
        };
        let dim = first.embeddings.1.cols;
        if let Some((n, s)) = shards.iter().enumerate().find(|(_, s)| s.embeddings.1.cols != dim) {
            return Err(bad(format!(
                "embeddings.{n}.npy has dimension {}, embeddings.0.npy {dim}",
                s.embeddings.1.cols
            )));
        }
        if shards.iter().any(|s| s.pooled.is_some()) != shards.iter().all(|s| s.pooled.is_some()) {
            return Err(bad("pooled.N.npy is given for some shards but not all".into()));
        }
        let docs: usize = shards.iter().map(|s| s.doclens.len()).sum();
        let corpus = dir.join(CORPUS_FILE);
        let lines = count_corpus_lines(&corpus)?;
        if lines != docs {
            return Err(bad(format!("{CORPUS_FILE} has {lines} documents but the doclens count {docs}")));
        }
        Ok(EmbeddingsDir { dir: dir.to_path_buf(), shards, dim, docs })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn len(&self) -> usize {
        self.docs
    }

    pub fn is_empty(&self) -> bool {
        self.docs == 0
    }

    /// Every document in order, read one at a time (memory: one document's vectors).
    pub fn docs(&self) -> Result<impl Iterator<Item = Result<EmbeddedDoc>> + '_> {
        let corpus = CorpusReader::open(&self.dir.join(CORPUS_FILE))?;
        let mut shards = self.shards.iter();
        let mut current: Option<(std::slice::Iter<'_, usize>, ArrayReader, Option<ArrayReader>)> = None;
        let mut corpus = corpus;
        Ok(std::iter::from_fn(move || loop {
            if current.is_none() {
                let shard = shards.next()?;
                let open = || -> Result<_> {
                    let pooled = shard.pooled.as_ref().map(|(p, h)| ArrayReader::open(p, h)).transpose()?;
                    Ok((
                        shard.doclens.iter(),
                        ArrayReader::open(&shard.embeddings.0, &shard.embeddings.1)?,
                        pooled,
                    ))
                };
                match open() {
                    Ok(opened) => current = Some(opened),
                    Err(e) => return Some(Err(e)),
                }
            }
            let (lens, tokens, pooled) = current.as_mut().expect("a shard is open");
            let Some(&n) = lens.next() else {
                current = None;
                continue;
            };
            let mut read = || -> Result<EmbeddedDoc> {
                let doc = corpus.next().ok_or_else(|| CellarError::invalid("the corpus ended early"))??;
                let pooled = pooled.as_mut().map(|p| p.rows(1)).transpose()?;
                Ok(EmbeddedDoc {
                    id: doc.id,
                    title: doc.title,
                    text: doc.text,
                    metadata: doc.metadata,
                    tokens: tokens.rows(n)?,
                    pooled,
                })
            };
            return Some(read());
        }))
    }
}

/// Token and pooled vectors of one document, as `read_in_order` gives them.
pub type GivenVectors = (Vec<f32>, Vec<f32>);

/// The dimension, and the vectors of the documents `ids` in that order, of a small folder such
/// as a collection's queries (`cellar eval --query-vectors`): a pooled vector not given is the
/// normalised mean of the tokens, as a build makes it; an id given twice in the folder, or one
/// of `ids` missing from it, is an error naming it.
pub fn read_in_order<'a>(
    dir: &Path,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<(usize, Vec<GivenVectors>)> {
    let (dim, mut by_id) = read_by_id(dir)?;
    let given = ids
        .into_iter()
        .map(|id| {
            by_id
                .remove(id)
                .ok_or_else(|| CellarError::invalid(format!("{}: no vectors for {id:?}", dir.display())))
        })
        .collect::<Result<_>>()?;
    Ok((dim, given))
}

fn read_by_id(dir: &Path) -> Result<(usize, std::collections::HashMap<String, GivenVectors>)> {
    let folder = EmbeddingsDir::open(dir)?;
    let dim = folder.dim();
    let mut by_id = std::collections::HashMap::with_capacity(folder.len());
    for doc in folder.docs()? {
        let doc = doc?;
        let pooled = match doc.pooled {
            Some(pooled) => pooled,
            None => crate::vectors::mean_normalized(&doc.tokens, dim).ok_or_else(|| {
                CellarError::invalid(format!(
                    "{}: {:?}: its token vectors average to zero",
                    dir.display(),
                    doc.id
                ))
            })?,
        };
        if by_id.insert(doc.id.clone(), (doc.tokens, pooled)).is_some() {
            return Err(CellarError::invalid(format!("{}: {:?} appears twice", dir.display(), doc.id)));
        }
    }
    Ok((dim, by_id))
}

/// Reads rows of one array in order, converting float16 to float32.
struct ArrayReader {
    path: PathBuf,
    reader: BufReader<File>,
    dtype: NpyDtype,
    cols: usize,
    bytes: Vec<u8>,
}

impl ArrayReader {
    fn open(path: &Path, header: &NpyHeader) -> Result<ArrayReader> {
        use std::io::Seek;
        let mut file = File::open(path).at(path)?;
        file.seek(std::io::SeekFrom::Start(header.data_offset)).at(path)?;
        Ok(ArrayReader {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, file),
            dtype: header.dtype,
            cols: header.cols,
            bytes: Vec::new(),
        })
    }

    fn rows(&mut self, n: usize) -> Result<Vec<f32>> {
        self.bytes.resize(n * self.cols * self.dtype.bytes(), 0);
        self.reader.read_exact(&mut self.bytes).at(&self.path)?;
        Ok(match self.dtype {
            NpyDtype::F32 => {
                self.bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
            }
            NpyDtype::F16 => {
                self.bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
            }
        })
    }
}

pub(crate) fn read_doclens(path: &Path) -> Result<Vec<usize>> {
    let bytes = std::fs::read(path).at(path)?;
    let lens: Vec<usize> = serde_json::from_slice(&bytes).map_err(|e| {
        CellarError::invalid(format!("{}: not a JSON list of token counts: {e}", path.display()))
    })?;
    if let Some(i) = lens.iter().position(|n| *n == 0) {
        return Err(CellarError::invalid(format!(
            "{}: document {i} has 0 tokens (every document needs at least one vector)",
            path.display()
        )));
    }
    Ok(lens)
}

fn count_corpus_lines(path: &Path) -> Result<usize> {
    let mut reader = CorpusReader::open(path)?;
    let mut n = 0;
    for doc in &mut reader {
        doc?;
        n += 1;
    }
    Ok(n)
}

/// Writes the token vectors, pooled vectors, ids and texts of the index at `index` into `out`
/// (a new folder) in the layout above, `shard_docs` documents per shard, as `dtype`; returns
/// the documents written. An index with a PCA is refused (its token vectors are projected and
/// its pooled ones are not), and vectors of a lossy codec are exported as decoded.
pub fn export(index: &Path, out: &Path, dtype: NpyDtype, shard_docs: usize) -> Result<usize> {
    crate::written::refuse_written(index, "export")?;
    let index = Index::open(index, OpenOptions::default())?;
    if index.config().pca_dim.is_some() {
        return Err(CellarError::invalid(format!(
            "{}: an index with a PCA projection cannot be exported (its token vectors are projected)",
            index.dir().display()
        )));
    }
    if out.exists() {
        return Err(CellarError::invalid(format!("{}: already exists; choose a new folder", out.display())));
    }
    std::fs::create_dir_all(out).at(out)?;
    let store = VectorStore::open(&index.dir().join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
    let pooled = index.pooled()?;
    let dim = store.dim();
    let mut corpus = String::new();
    for (shard, first) in (0..store.len()).step_by(shard_docs.max(1)).enumerate() {
        let ids: Vec<DocId> =
            (first..(first + shard_docs.max(1)).min(store.len())).map(|i| DocId(i as u32)).collect();
        let batch = store.read_batch(&ids)?;
        let (mut tokens, mut lens, mut pooled_rows) = (Vec::new(), Vec::new(), Vec::new());
        for (i, id) in ids.iter().enumerate() {
            let before = tokens.len();
            store.codec().decode(batch.record(i).tokens, &mut tokens);
            lens.push((tokens.len() - before) / dim);
            pooled_rows.extend(pooled.row(id.0 as usize));
            let doc = index.texts().get(*id)?;
            let mut line = serde_json::json!({"_id": doc.id, "title": doc.title, "text": doc.text});
            if !doc.metadata.is_empty() {
                line["metadata"] = serde_json::to_value(&doc.metadata).expect("metadata serializes");
            }
            corpus.push_str(&line.to_string());
            corpus.push('\n');
        }
        write_shard(out, shard, dtype, dim, &tokens, &pooled_rows, &lens)?;
    }
    let path = out.join(CORPUS_FILE);
    std::fs::write(&path, corpus).at(&path)?;
    Ok(store.len())
}

/// Writes shard `shard` of the layout into `out`: `embeddings.N.npy` (`tokens`, `dim` wide),
/// `pooled.N.npy` (one row per document) and `doclens.N.json` (`lens`), as `dtype`.
pub fn write_shard(
    out: &Path,
    shard: usize,
    dtype: NpyDtype,
    dim: usize,
    tokens: &[f32],
    pooled: &[f32],
    lens: &[usize],
) -> Result<()> {
    write_npy(&out.join(format!("embeddings.{shard}.npy")), dtype, tokens, dim)?;
    write_npy(&out.join(format!("pooled.{shard}.npy")), dtype, pooled, dim)?;
    let doclens = out.join(format!("doclens.{shard}.json"));
    std::fs::write(&doclens, serde_json::to_vec(lens).expect("a list of counts")).at(&doclens)
}

/// Writes `values` as a C-ordered `(values.len() / cols, cols)` `.npy` array (format 1.0).
pub fn write_npy(path: &Path, dtype: NpyDtype, values: &[f32], cols: usize) -> Result<()> {
    let descr = match dtype {
        NpyDtype::F32 => "<f4",
        NpyDtype::F16 => "<f2",
    };
    let rows = values.len() / cols.max(1);
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // Magic (6) + version (2) + length (2) + header + newline, padded to 64 bytes.
    let total = (10 + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(total - 10 - header.len() - 1));
    header.push('\n');
    let mut bytes = Vec::with_capacity(total + values.len() * dtype.bytes());
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    match dtype {
        NpyDtype::F32 => values.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
        NpyDtype::F16 => {
            values.iter().for_each(|v| bytes.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes()))
        }
    }
    std::fs::write(path, bytes).at(path)
}
