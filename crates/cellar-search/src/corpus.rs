//! Reading collections in BEIR layout: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`.
//!
//! The corpus is streamed line by line, so a corpus larger than RAM can be indexed. Every bad line
//! is reported with its file and 1-based line number.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

use cellar_core::{CellarError, IoContext, Result};
use serde::Deserialize;

use crate::meta::Metadata;

/// One document of a collection.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The collection's own (string) id.
    pub id: String,
    pub title: String,
    pub text: String,
    /// Scalar values filters run on (`crate::meta`); empty when the document has none.
    pub metadata: Metadata,
    /// The group of a document of a grouped index (`IndexConfig::grouped`), `None` elsewhere.
    pub group: Option<String>,
}

impl Document {
    /// A document without metadata.
    pub fn new(id: impl Into<String>, title: impl Into<String>, text: impl Into<String>) -> Document {
        Document {
            id: id.into(),
            title: title.into(),
            text: text.into(),
            metadata: Metadata::default(),
            group: None,
        }
    }

    /// What the encoder and BM25 see: title and text joined by a space.
    pub fn content(&self) -> String {
        match (self.title.is_empty(), self.text.is_empty()) {
            (true, _) => self.text.clone(),
            (false, true) => self.title.clone(),
            (false, false) => format!("{} {}", self.title, self.text),
        }
    }
}

/// One query of a collection.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub id: String,
    pub text: String,
}

/// Relevance judgments: query id → (document id → grade). Grades ≤ 0 mean not relevant.
pub type Qrels = HashMap<String, HashMap<String, i32>>;

#[derive(Deserialize)]
struct RawLine {
    #[serde(rename = "_id", alias = "id")]
    id: Option<serde_json::Value>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    text: Option<String>,
    /// BEIR's corpora carry an object (often empty) here.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Where a collection's files are, given either a BEIR folder or a single `corpus.jsonl`.
#[derive(Clone, Debug)]
pub struct BeirPaths {
    pub corpus: PathBuf,
    pub root: Option<PathBuf>,
}

impl BeirPaths {
    /// `path` is a BEIR folder (holding `corpus.jsonl`) or a `.jsonl` corpus file.
    pub fn locate(path: &Path) -> Result<BeirPaths> {
        if path.is_dir() {
            let corpus = path.join("corpus.jsonl");
            if !corpus.is_file() {
                return Err(CellarError::InvalidInput(format!(
                    "{}: not a BEIR folder (no corpus.jsonl inside)",
                    path.display()
                )));
            }
            return Ok(BeirPaths { corpus, root: Some(path.to_path_buf()) });
        }
        if path.is_file() {
            return Ok(BeirPaths { corpus: path.to_path_buf(), root: None });
        }
        Err(CellarError::InvalidInput(format!(
            "{}: no such collection folder or corpus file",
            path.display()
        )))
    }

    /// The folder, or an error naming what needs it.
    pub fn root(&self, what: &str) -> Result<&Path> {
        self.root.as_deref().ok_or_else(|| {
            CellarError::InvalidInput(format!("{what} needs a BEIR folder, not a single corpus file"))
        })
    }

    pub fn queries(&self) -> Result<Vec<Query>> {
        read_queries(&self.root("queries")?.join("queries.jsonl"))
    }

    pub fn qrels(&self, split: &str) -> Result<Qrels> {
        read_qrels(&self.root("qrels")?.join("qrels").join(format!("{split}.tsv")))
    }
}

/// Streams the documents of a corpus file; each item is one document or the error of one line.
pub struct CorpusReader {
    path: PathBuf,
    lines: Lines<BufReader<File>>,
    line_no: usize,
}

impl CorpusReader {
    pub fn open(path: &Path) -> Result<CorpusReader> {
        let file = File::open(path).at(path)?;
        Ok(CorpusReader { path: path.to_path_buf(), lines: BufReader::new(file).lines(), line_no: 0 })
    }

    /// 1-based number of the last line read.
    pub fn line_no(&self) -> usize {
        self.line_no
    }
}

impl Iterator for CorpusReader {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Result<Document>> {
        loop {
            let line = self.lines.next()?;
            self.line_no += 1;
            let line = match line {
                Ok(line) => line,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Some(Err(bad_line(&self.path, self.line_no, NOT_UTF8)))
                }
                Err(e) => return Some(Err(CellarError::io(&self.path, e))),
            };
            if line.trim().is_empty() {
                continue;
            }
            return Some(parse_document(&line).map_err(|detail| bad_line(&self.path, self.line_no, &detail)));
        }
    }
}

/// What a line that is not text is told (found by `cellar-bench fuzz`: it was an I/O error).
pub const NOT_UTF8: &str = "not UTF-8 text";

fn bad_line(path: &Path, line_no: usize, detail: &str) -> CellarError {
    CellarError::InvalidInput(format!("{} line {line_no}: {detail}", path.display()))
}

fn parse_document(line: &str) -> std::result::Result<Document, String> {
    let raw: RawLine = serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
    let id = id_string(raw.id)?;
    let metadata = raw.metadata.map(Metadata::from_json).transpose()?.unwrap_or_default();
    Ok(Document {
        id,
        title: raw.title.unwrap_or_default(),
        text: raw.text.unwrap_or_default(),
        metadata,
        group: None,
    })
}

fn id_string(id: Option<serde_json::Value>) -> std::result::Result<String, String> {
    let id = match id {
        Some(serde_json::Value::String(s)) => s,
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(_) => return Err("\"_id\" must be a string or a number".into()),
        None => return Err("missing \"_id\"".into()),
    };
    if id.trim().is_empty() {
        return Err("empty \"_id\"".into());
    }
    Ok(id)
}

/// Reads every query of a `queries.jsonl` (small enough to hold in memory).
pub fn read_queries(path: &Path) -> Result<Vec<Query>> {
    let mut queries = Vec::new();
    for doc in CorpusReader::open(path)? {
        let doc = doc?;
        queries.push(Query { id: doc.id, text: doc.text });
    }
    Ok(queries)
}

/// Reads a qrels TSV (`query-id corpus-id score`, optional header line).
pub fn read_qrels(path: &Path) -> Result<Qrels> {
    let bytes = std::fs::read(path).at(path)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|b| **b == b'\n').count();
        bad_line(path, line, NOT_UTF8)
    })?;
    let mut qrels = Qrels::new();
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
        if line.trim().is_empty() || (i == 0 && fields.first() == Some(&"query-id")) {
            continue;
        }
        let [query, doc, grade] = fields[..] else {
            return Err(bad_line(path, i + 1, "expected 3 tab-separated fields: query-id corpus-id score"));
        };
        let grade: i32 = grade.parse().map_err(|_| bad_line(path, i + 1, "score is not an integer"))?;
        qrels.entry(query.to_string()).or_default().insert(doc.to_string(), grade);
    }
    Ok(qrels)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `cellar-bench fuzz` (targets corpus and qrels): a line that is not UTF-8 was an
    /// I/O error naming no line; it is the caller's input, refused with its line number.
    #[test]
    fn a_line_that_is_not_utf8_is_bad_input_at_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus.jsonl");
        std::fs::write(&corpus, b"{\"_id\": \"a\", \"text\": \"x\"}\n{\"_id\": \"b\", \"text\": \"\xff\"}\n")
            .unwrap();
        let results: Vec<Result<Document>> = CorpusReader::open(&corpus).unwrap().collect();
        assert!(results[0].is_ok());
        let err = results[1].as_ref().unwrap_err().to_string();
        assert!(err.contains("line 2: not UTF-8"), "{err}");
        let qrels = dir.path().join("qrels.tsv");
        std::fs::write(&qrels, b"q1\td1\t1\nq2\td\xc3\t1\n").unwrap();
        let err = read_qrels(&qrels).unwrap_err();
        assert!(matches!(&err, CellarError::InvalidInput(m) if m.contains("line 2: not UTF-8")), "{err}");
    }
}
