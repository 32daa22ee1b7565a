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

/// A Python argument as JSON, for a request type's `serde` form: `None`, `bool`, `int`,
/// finite `float`, `str`, and lists, tuples and dicts of them; anything with a `tolist` method
/// (NumPy arrays) through it. `name` is the argument, for the message.
pub fn python_to_json(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple};
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        return match (value.extract::<i64>(), value.extract::<u64>()) {
            (Ok(i), _) => Ok(Value::from(i)),
            (_, Ok(u)) => Ok(Value::from(u)),
            _ => Err(crate::errors::invalid(py, format!("{name}: {value} is out of range"))),
        };
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        let x = f.value();
        return serde_json::Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| crate::errors::invalid(py, format!("{name} must be a finite number, got {x}")));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_string()));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in dict.iter() {
            let key: String = k
                .extract()
                .map_err(|_| pyo3::exceptions::PyTypeError::new_err(format!("{name}: keys must be str")))?;
            let item = python_to_json(py, &format!("{name}.{key}"), &v)?;
            map.insert(key, item);
        }
        return Ok(Value::Object(map));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value.try_iter()?;
        return items
            .enumerate()
            .map(|(i, item)| python_to_json(py, &format!("{name}[{i}]"), &item?))
            .collect::<PyResult<Vec<Value>>>()
            .map(Value::Array);
    }
    if value.hasattr("tolist")? {
        return python_to_json(py, name, &value.call_method0("tolist")?);
    }
    let kind = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    Err(pyo3::exceptions::PyTypeError::new_err(format!("{name}: a {kind} is not a JSON value")))
}

/// A bare `(n, dim)` array under `key` (`query_vectors`, a document's `vectors`) is the token
/// vectors: `{"tokens": array}`.
pub fn bare_tokens(fields: &mut serde_json::Map<String, Value>, key: &str) {
    if let Some(tokens) = fields.get_mut(key).filter(|v| v.is_array()) {
        *tokens = serde_json::json!({ "tokens": tokens.take() });
    }
}
