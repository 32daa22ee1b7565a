//! The documents of a write, in the two shapes `Index.add`/`update` take (and `cellar.Client`
//! sends): dicts (`{"id", "title", "text", "metadata", "vectors"}`), or the columns of
//! `Index.from_embeddings` (ids, `doc_vectors`, `texts`, `pooled`, `metadata`), read by its own
//! reader ([`Sources`]).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{json, Value};

use cellar_search::request::VectorDtype;
use cellar_search::{DocIn, QueryVectorsIn, WriteOp, WriteRequest};

use crate::convert::{bare_tokens, python_to_json, to_python};
use crate::embeddings::Sources;
use crate::errors::invalid;

/// `doc_vectors, texts, pooled, metadata` of a write in the columns form.
pub type Columns<'a, 'py> = (Column<'a, 'py>, Column<'a, 'py>, Column<'a, 'py>, Column<'a, 'py>);

/// One optional column of a write (`texts`, `pooled`, ...).
pub type Column<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// How [`column_docs`] holds each document's vectors: rows of floats (written here) or the
/// compact base64 form (sent over HTTP by `cellar.Client`).
enum VectorForm {
    Rows,
    Compact,
}

/// The documents of a write given as the columns of `from_embeddings` (`ids`, `doc_vectors`,
/// then `texts`, `pooled`, `metadata`), read and checked by its reader ([`Sources`]): the one
/// reading of that shape, for `Index.add`/`update` and, through [`_documents_from_columns`],
/// `cellar.Client`'s.
fn column_docs(
    py: Python<'_>,
    ids: &Bound<'_, PyAny>,
    doc_vectors: &Bound<'_, PyAny>,
    (texts, pooled, metadata): (Column<'_, '_>, Column<'_, '_>, Column<'_, '_>),
    form: VectorForm,
) -> PyResult<Vec<DocIn>> {
    let mut sources = Sources::new(py, ids, doc_vectors, texts, pooled, metadata)?;
    let dim = sources.dim();
    let mut docs = Vec::new();
    while let Some(doc) = sources.next_doc(py)? {
        let vectors = match form {
            VectorForm::Rows => QueryVectorsIn {
                tokens: doc.tokens.chunks_exact(dim).map(<[f32]>::to_vec).collect(),
                pooled: doc.pooled,
                ..QueryVectorsIn::default()
            },
            VectorForm::Compact => {
                QueryVectorsIn::compact(&doc.tokens, doc.pooled.as_deref(), VectorDtype::F32)
            }
        };
        docs.push(DocIn {
            group: None,
            id: doc.id,
            title: doc.title,
            text: doc.text,
            metadata: doc.metadata,
            vectors: Some(vectors),
        });
    }
    Ok(docs)
}

/// The documents of the columns `ids, doc_vectors, texts, pooled, metadata` (as
/// `Index.from_embeddings` takes them) as the dicts of a write's JSON body, vectors in the
/// compact base64 form (`compact`) or as rows: `cellar.Client`'s reading of the columns, the
/// same as `Index.add`'s.
#[pyfunction]
#[pyo3(signature = (ids, doc_vectors, texts=None, pooled=None, metadata=None, *, compact=true))]
pub fn _documents_from_columns<'py>(
    py: Python<'py>,
    ids: &Bound<'py, PyAny>,
    doc_vectors: &Bound<'py, PyAny>,
    texts: Option<&Bound<'py, PyAny>>,
    pooled: Option<&Bound<'py, PyAny>>,
    metadata: Option<&Bound<'py, PyAny>>,
    compact: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let form = if compact { VectorForm::Compact } else { VectorForm::Rows };
    let docs = column_docs(py, ids, doc_vectors, (texts, pooled, metadata), form)?;
    to_python(py, &docs)
}

/// The write of `docs` as operations `kind` ("add", "update"): one dict or a list of them, or,
/// with `columns` (`doc_vectors, texts, pooled, metadata`), the ids of documents given as
/// `from_embeddings` takes them.
pub fn request(
    py: Python<'_>,
    kind: &str,
    docs: &Bound<'_, PyAny>,
    columns: Columns<'_, '_>,
) -> PyResult<WriteRequest> {
    let op = |doc| if kind == "add" { WriteOp::Add(doc) } else { WriteOp::Update(doc) };
    let (doc_vectors, texts, pooled, metadata) = columns;
    if let Some(doc_vectors) = doc_vectors {
        let docs = column_docs(py, docs, doc_vectors, (texts, pooled, metadata), VectorForm::Rows)?;
        return Ok(WriteRequest { ops: docs.into_iter().map(op).collect() });
    }
    if let Some(name) = [("texts", texts), ("pooled", pooled), ("metadata", metadata)]
        .iter()
        .find_map(|(name, given)| given.is_some().then_some(name))
    {
        return Err(invalid(
            py,
            format!("{name} goes with doc_vectors (the columns form); documents as dicts carry it inside"),
        ));
    }
    let items: Vec<Bound<'_, PyAny>> = if docs.is_instance_of::<PyDict>() {
        vec![docs.clone()]
    } else {
        docs.try_iter()?.collect::<PyResult<_>>()?
    };
    let ops = items
        .iter()
        .enumerate()
        .map(|(i, doc)| {
            let mut doc = python_to_json(py, &format!("docs[{i}]"), doc)?;
            if let Value::Object(fields) = &mut doc {
                bare_tokens(fields, "vectors");
            }
            Ok(json!({ kind: doc }))
        })
        .collect::<PyResult<Vec<Value>>>()?;
    from_json(py, ops)
}

/// A write from its operations' JSON (`{"add": doc}`, `{"delete": id}`, ...).
pub fn from_json(py: Python<'_>, ops: Vec<Value>) -> PyResult<WriteRequest> {
    serde_json::from_value(json!({ "ops": ops })).map_err(|e| invalid(py, e.to_string()))
}
