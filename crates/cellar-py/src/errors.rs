//! Turning Rust errors (and panics) into the exceptions of `cellar._errors`.
//!
//! The classes are defined in Python (`python/cellar/_errors.py`) because some have two bases
//! (`InvalidInputError` is also a `ValueError`, `CellarIOError` also an `OSError`), which a native
//! exception type cannot express. Every raised exception carries a `code` attribute, the stable
//! identifier of [`CellarError::code`] (`"panic"` for a Rust panic).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cellar_core::CellarError;
use pyo3::call::PyCallArgs;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// Module that defines the exception classes.
const ERRORS_MODULE: &str = "cellar._errors";

/// Name of the Python class raised for `error`.
pub fn class_name(error: &CellarError) -> &'static str {
    match error {
        CellarError::InvalidInput(_)
        | CellarError::WrongDimension { .. }
        | CellarError::DocOutOfRange { .. } => "InvalidInputError",
        CellarError::NotFound(_) => "NotFoundError",
        CellarError::Corrupted { .. } => "CorruptedError",
        CellarError::Incompatible { .. } => "IncompatibleError",
        CellarError::Model { .. } => "ModelError",
        CellarError::Locked { .. } => "LockedError",
        CellarError::Unsupported(_) => "UnsupportedError",
        CellarError::Internal(_) => "InternalError",
        CellarError::Io { .. } => "CellarIOError",
    }
}

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(py.import(ERRORS_MODULE)?.getattr(name)?.cast_into::<PyType>()?)
}

/// Builds an instance of `name` from `args`, tags it with `code` and wraps it as a `PyErr`.
fn raise<'py>(py: Python<'py>, name: &str, code: &str, args: impl PyCallArgs<'py>) -> PyErr {
    let built = class(py, name).and_then(|cls| {
        let exc = cls.call1(args)?;
        exc.setattr("code", code)?;
        Ok(PyErr::from_value(exc))
    });
    // Only a broken installation (no `cellar._errors`) gets here; still raise something useful.
    built.unwrap_or_else(|e| PyRuntimeError::new_err(format!("{code}: {e}")))
}

/// The Python exception for a Rust error.
pub fn to_py(py: Python<'_>, error: CellarError) -> PyErr {
    let message = error.to_string();
    match &error {
        // OSError(errno, strerror, filename) fills `.errno`, `.strerror` and `.filename`.
        CellarError::Io { path, source } => match source.raw_os_error() {
            Some(errno) => raise(py, "CellarIOError", error.code(), (errno, message, path.clone())),
            None => raise(py, "CellarIOError", error.code(), (message,)),
        },
        _ => raise(py, class_name(&error), error.code(), (message,)),
    }
}

/// `InvalidInputError` (a `ValueError`) with `message`, for bad arguments caught on the Python side.
pub fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    to_py(py, CellarError::InvalidInput(message.into()))
}

/// Maps a `cellar_core::Result` into a `PyResult`.
pub trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for cellar_core::Result<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// A failure of work done without the GIL: an ordinary error, or a caught panic's message.
pub enum Detached {
    Error(CellarError),
    Panic(String),
}

/// Runs `work` with the GIL released, so other Python threads run meanwhile, and converts its
/// error — or a panic, which must not take the interpreter down — into a Python exception.
pub fn without_gil<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce() -> cellar_core::Result<T> + Send,
    T: Send,
{
    let outcome = py.detach(|| match catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Detached::Error(error)),
        Err(payload) => Err(Detached::Panic(panic_message(payload.as_ref()))),
    });
    outcome.map_err(|failure| match failure {
        Detached::Error(error) => to_py(py, error),
        Detached::Panic(message) => {
            raise(py, "CellarError", "panic", (format!("internal error (a bug in cellar): {message}"),))
        }
    })
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_string(),
        (_, Some(s)) => s.clone(),
        _ => "panic with a non-string payload".to_string(),
    }
}
