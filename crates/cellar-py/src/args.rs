//! Checking and converting Python arguments. A bad value raises `InvalidInputError` (a
//! `ValueError`) naming the argument; a value of the wrong type raises `TypeError`.

use std::collections::HashMap;
use std::str::FromStr;

use cellar_core::CellarError;
use cellar_search::corpus::{Qrels, Query};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::errors::{invalid, IntoPyResult};

/// Parses a string option (`mode`, `reader`, `codec`) with its `FromStr`, which names the choices.
pub fn parse_choice<T: FromStr<Err = CellarError>>(py: Python<'_>, value: &str) -> PyResult<T> {
    value.parse::<T>().py_err(py)
}

/// A count that must be at least 1 (`k`, `candidates`, ...).
pub fn positive(py: Python<'_>, name: &str, value: i64) -> PyResult<usize> {
    if value < 1 {
        return Err(invalid(py, format!("{name} must be a positive integer, got {value}")));
    }
    usize::try_from(value).map_err(|_| invalid(py, format!("{name} is too large: {value}")))
}

/// An optional count that must be at least 1 when given.
pub fn positive_opt(py: Python<'_>, name: &str, value: Option<i64>) -> PyResult<Option<usize>> {
    value.map(|v| positive(py, name, v)).transpose()
}

/// A query or document id: a `str`, or an `int` taken as its decimal form (BEIR ids are strings
/// but some collections use numbers).
pub fn id(value: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(s.to_str()?.to_string());
    }
    if value.is_instance_of::<pyo3::types::PyInt>() && !value.is_instance_of::<pyo3::types::PyBool>() {
        return Ok(value.extract::<i64>()?.to_string());
    }
    Err(PyTypeError::new_err(format!("{what} must be a str or an int, not {}", type_name(value))))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// Queries as `{qid: text}` or an iterable of `(qid, text)` pairs, in the caller's order.
pub fn queries(value: &Bound<'_, PyAny>) -> PyResult<Vec<Query>> {
    let mut out = Vec::new();
    if let Ok(dict) = value.cast::<PyDict>() {
        for (qid, text) in dict.iter() {
            out.push(query(&qid, &text)?);
        }
        return Ok(out);
    }
    if value.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "queries must be a dict {qid: text} or a list of (qid, text), not a str",
        ));
    }
    let items = value.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "queries must be a dict {{qid: text}} or a list of (qid, text), not {}",
            type_name(value)
        ))
    })?;
    for item in items {
        let item = item?;
        let (qid, text): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract().map_err(|_| {
            PyTypeError::new_err(format!("each query must be a (qid, text) pair, got {item}"))
        })?;
        out.push(query(&qid, &text)?);
    }
    Ok(out)
}

fn query(qid: &Bound<'_, PyAny>, text: &Bound<'_, PyAny>) -> PyResult<Query> {
    let id = id(qid, "a query id")?;
    let text = text
        .cast::<PyString>()
        .map_err(|_| {
            PyTypeError::new_err(format!("the text of query {id:?} must be a str, not {}", type_name(text)))
        })?
        .to_str()?
        .to_string();
    Ok(Query { id, text })
}

/// Judgments as `{qid: {docid: grade}}`, grades being ints (≤ 0: not relevant).
pub fn qrels(value: &Bound<'_, PyAny>) -> PyResult<Qrels> {
    let dict = value.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "qrels must be a dict {{qid: {{docid: grade}}}}, not {}",
            type_name(value)
        ))
    })?;
    let mut qrels = Qrels::new();
    for (qid, judged) in dict.iter() {
        let qid = id(&qid, "a qrels query id")?;
        let judged = judged.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "qrels[{qid:?}] must be a dict {{docid: grade}}, not {}",
                type_name(&judged)
            ))
        })?;
        let mut grades = HashMap::new();
        for (doc, grade) in judged.iter() {
            let doc = id(&doc, "a qrels document id")?;
            if grade.is_instance_of::<pyo3::types::PyBool>() || !grade.is_instance_of::<pyo3::types::PyInt>()
            {
                return Err(PyTypeError::new_err(format!(
                    "qrels[{qid:?}][{doc:?}] must be an int grade, not {}",
                    type_name(&grade)
                )));
            }
            let grade: i32 = grade.extract().map_err(|_| {
                invalid(value.py(), format!("qrels[{qid:?}][{doc:?}] = {grade} is out of range"))
            })?;
            grades.insert(doc, grade);
        }
        qrels.insert(qid, grades);
    }
    Ok(qrels)
}
