//! Rust values to plain Python objects (dicts, lists, str, int, float, bool, None), through
//! their `serde` form: `index.json`, search parameters, timings and hits all reach Python this way.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde::Serialize;
use serde_json::Value;

/// Converts any serialisable value into the equivalent Python object.
///
/// The value goes through JSON text, not `serde_json::to_value`: text writes each `f32` in its
/// shortest form, so an `alpha` of `0.3f32` reaches Python as `0.3`, not `0.30000001192092896`
/// (the same rule as [`f32_to_python`]).
pub fn to_python<'py>(py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyAny>> {
    let error = |e: serde_json::Error| PyRuntimeError::new_err(e.to_string());
    let json: Value = serde_json::from_str(&serde_json::to_string(value).map_err(error)?).map_err(error)?;
    json_to_python(py, &json)
}

/// The `f64` nearest to the shortest decimal form of `x` (`0.3f32` → `0.3`).
pub fn f32_to_python(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(x as f64)
}

/// Converts a JSON value into the equivalent Python object.
pub fn json_to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, json_to_python(py, item)?)?;
            }
            dict.into_any()
        }
    })
}
