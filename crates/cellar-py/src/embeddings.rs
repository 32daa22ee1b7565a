//! `Index.from_embeddings`: the caller's token vectors, pulled one document at a time from
//! Python iterables while the build runs with the GIL released.

use std::sync::Mutex;

use cellar_core::{CellarError, Result};
use cellar_search::EmbeddedDoc;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::errors::invalid;

/// The Python iterables of one build, advanced together.
pub struct Sources {
    ids: Py<PyAny>,
    vectors: Py<PyAny>,
    texts: Option<Py<PyAny>>,
    pooled: Option<Py<PyAny>>,
    metadata: Option<Py<PyAny>>,
    /// The document `vectors` yielded first (read to learn the dimension).
    first: Option<(Vec<f32>, usize)>,
    dim: usize,
    at: usize,
    /// The Python exception that stopped the build, raised once it has returned.
    pub failure: Mutex<Option<PyErr>>,
}

/// A float32 matrix from a NumPy-like 2-D (or, for `rows_of_one`, 1-D) array of float32 or
/// float16: its values and rows. `what` names it in errors.
pub fn array_values(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    what: &str,
    one_row: bool,
) -> PyResult<(Vec<f32>, usize, usize)> {
    let dtype = match value.getattr("dtype") {
        Ok(dtype) => dtype.str()?.to_string(),
        Err(_) => {
            return Err(PyTypeError::new_err(format!(
                "{what}: a NumPy array of float32 or float16 is needed, got {}",
                value.get_type().name()?
            )))
        }
    };
    let value = match dtype.as_str() {
        "float32" => value.clone(),
        "float16" => value.call_method1("astype", ("float32",))?,
        other => {
            return Err(PyTypeError::new_err(format!(
            "{what}: dtype {other}; embeddings must be float32 or float16 (convert with .astype(np.float32))"
        )))
        }
    };
    let buffer = PyBuffer::<f32>::get(&value).map_err(|e| {
        PyTypeError::new_err(format!("{what}: its values cannot be read as a float32 buffer ({e})"))
    })?;
    let shape = buffer.shape().to_vec();
    let (rows, cols) = match (one_row, shape.as_slice()) {
        (false, [rows, cols]) => (*rows, *cols),
        (true, [cols]) => (1, *cols),
        _ => {
            let needed = if one_row { "a 1-D array (dim,)" } else { "a 2-D array (tokens, dim)" };
            return Err(invalid(py, format!("{what}: shape {shape:?}, but {needed} is needed")));
        }
    };
    Ok((buffer.to_vec(py)?, rows, cols))
}

fn next_item<'py>(py: Python<'py>, iterator: &Py<PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let iterator = iterator.bind(py);
    match iterator.call_method0("__next__") {
        Ok(item) => Ok(Some(item)),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) => Ok(None),
        Err(e) => Err(e),
    }
}

fn iterate(value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    Ok(value.try_iter()?.into_any().unbind())
}

impl Sources {
    /// Takes iterators of the arguments and reads the first document's vectors (the dimension).
    pub fn new(
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        texts: Option<&Bound<'_, PyAny>>,
        pooled: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Sources> {
        let vectors = iterate(vectors)?;
        let Some(first) = next_item(py, &vectors)? else {
            return Err(invalid(py, "doc_vectors is empty: an index needs at least one document"));
        };
        let (values, rows, dim) = array_values(py, &first, "doc_vectors[0]", false)?;
        if dim == 0 || rows == 0 {
            return Err(invalid(py, format!("doc_vectors[0]: shape ({rows}, {dim}) holds no vector")));
        }
        Ok(Sources {
            ids: iterate(ids)?,
            vectors,
            texts: texts.map(iterate).transpose()?,
            pooled: pooled.map(iterate).transpose()?,
            metadata: metadata.map(iterate).transpose()?,
            first: Some((values, rows)),
            dim,
            at: 0,
            failure: Mutex::new(None),
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The next document, or the end (checking every argument ended together).
    pub fn next_doc(&mut self, py: Python<'_>) -> PyResult<Option<EmbeddedDoc>> {
        let i = self.at;
        let vectors = match self.first.take() {
            Some(first) => Some(first),
            None => match next_item(py, &self.vectors)? {
                Some(item) => {
                    let (values, rows, cols) = array_values(py, &item, &format!("doc_vectors[{i}]"), false)?;
                    if cols != self.dim {
                        return Err(invalid(
                            py,
                            format!(
                                "doc_vectors[{i}]: dimension {cols}, but doc_vectors[0] has {}",
                                self.dim
                            ),
                        ));
                    }
                    Some((values, rows))
                }
                None => None,
            },
        };
        let id = next_item(py, &self.ids)?;
        let text = self.texts.as_ref().map(|t| next_item(py, t)).transpose()?;
        let pooled = self.pooled.as_ref().map(|p| next_item(py, p)).transpose()?;
        let metadata = self.metadata.as_ref().map(|m| next_item(py, m)).transpose()?;
        let Some((tokens, _)) = vectors else {
            let longer = [
                ("ids", id.is_some()),
                ("texts", text.flatten().is_some()),
                ("pooled", pooled.flatten().is_some()),
                ("metadata", metadata.flatten().is_some()),
            ];
            if let Some((name, _)) = longer.iter().find(|(_, more)| *more) {
                return Err(invalid(py, format!("{name} has more items than doc_vectors ({i})")));
            }
            return Ok(None);
        };
        let id: String = match id {
            Some(id) => {
                id.extract().map_err(|_| PyTypeError::new_err(format!("ids[{i}]: a str is needed")))?
            }
            None => return Err(invalid(py, format!("ids has {i} items, fewer than doc_vectors"))),
        };
        let text: String = match text {
            None => String::new(),
            Some(Some(t)) if t.is_none() => String::new(),
            Some(Some(text)) => {
                text.extract().map_err(|_| PyTypeError::new_err(format!("texts[{i}]: a str is needed")))?
            }
            Some(None) => return Err(invalid(py, format!("texts has {i} items, fewer than doc_vectors"))),
        };
        let pooled = match pooled {
            None => None,
            // `None` for one document: the normalised mean of its tokens, as for all without `pooled`.
            Some(Some(p)) if p.is_none() => None,
            Some(Some(p)) => {
                let (values, _, cols) = array_values(py, &p, &format!("pooled[{i}]"), true)?;
                if cols != self.dim {
                    return Err(invalid(
                        py,
                        format!("pooled[{i}]: dimension {cols}, but the token vectors have {}", self.dim),
                    ));
                }
                Some(values)
            }
            Some(None) => return Err(invalid(py, format!("pooled has {i} items, fewer than doc_vectors"))),
        };
        let metadata = match metadata {
            None => cellar_search::Metadata::default(),
            Some(Some(m)) if m.is_none() => cellar_search::Metadata::default(),
            Some(Some(m)) => {
                let value = crate::convert::python_to_json(py, &format!("metadata[{i}]"), &m)?;
                serde_json::from_value(value).map_err(|e| invalid(py, format!("metadata[{i}]: {e}")))?
            }
            Some(None) => return Err(invalid(py, format!("metadata has {i} items, fewer than doc_vectors"))),
        };
        self.at += 1;
        Ok(Some(EmbeddedDoc { id, title: String::new(), text, metadata, tokens, pooled }))
    }

    /// The documents as the engine takes them: each pulled with the GIL held; a Python error
    /// is kept in `failure` and stops the build.
    pub fn docs(&mut self) -> impl Iterator<Item = Result<EmbeddedDoc>> + Send + '_ {
        std::iter::from_fn(move || {
            Python::attach(|py| match self.next_doc(py) {
                Ok(doc) => doc.map(Ok),
                Err(e) => {
                    let message = e.to_string();
                    *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    Some(Err(CellarError::invalid(message)))
                }
            })
        })
    }
}
