//! Named tensors of a safetensors file, looked up with or without the `bert.` prefix.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use cellar_core::Result;

use crate::errors::model_err;

/// Every tensor of one safetensors file, as f32 on the CPU.
pub(crate) struct Weights {
    /// Tensors by their name in the file.
    tensors: HashMap<String, Tensor>,
    /// Prefix in front of the BERT tensors' names: `"bert."` or `""`.
    prefix: &'static str,
    /// The file, for error messages.
    path: PathBuf,
}

impl Weights {
    /// Loads `path`, a safetensors file of a BERT model (names with or without `bert.`).
    pub fn load_bert(path: &Path) -> Result<Weights> {
        let tensors = load_file(path)?;
        let prefix = ["bert.", ""]
            .into_iter()
            .find(|p| tensors.contains_key(&format!("{p}embeddings.word_embeddings.weight")))
            .ok_or_else(|| {
                model_err(
                    path,
                    "no embeddings.word_embeddings.weight (with or without \"bert.\"): not a BERT checkpoint",
                )
            })?;
        Ok(Weights { tensors, prefix, path: path.to_path_buf() })
    }

    /// Loads `path` as a plain map of tensors (no BERT prefix).
    pub fn load_plain(path: &Path) -> Result<Weights> {
        Ok(Weights { tensors: load_file(path)?, prefix: "", path: path.to_path_buf() })
    }

    /// The BERT tensor `name` (prefix added), checked to have `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let t = self.raw(&full).ok_or_else(|| model_err(&self.path, format!("missing tensor {full}")))?;
        if t.dims() != shape {
            let detail = format!("tensor {full} has shape {:?}, config.json implies {shape:?}", t.dims());
            return Err(model_err(&self.path, detail));
        }
        Ok(t.clone())
    }

    /// The BERT tensor `name` as a flat vector of `len` values.
    pub fn vec(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let t = self.get(name, &[len])?;
        t.to_vec1::<f32>().map_err(|e| model_err(&self.path, format!("tensor {name}: {e}")))
    }

    /// The BERT tensor `name` (prefix added), if the file has it.
    pub fn get_opt(&self, name: &str) -> Option<&Tensor> {
        self.raw(&format!("{}{name}", self.prefix))
    }

    /// The tensor stored under exactly `name`, if any.
    pub fn raw(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// The file the tensors came from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a safetensors file and converts every floating-point tensor to f32.
fn load_file(path: &Path) -> Result<HashMap<String, Tensor>> {
    if !path.is_file() {
        return Err(model_err(path, "missing (a model directory needs model.safetensors)"));
    }
    let raw = candle_core::safetensors::load(path, &Device::Cpu)
        .map_err(|e| model_err(path, format!("not a readable safetensors file: {e}")))?;
    let mut out = HashMap::with_capacity(raw.len());
    for (name, t) in raw {
        let t = match t.dtype() {
            DType::F32 => t,
            DType::F16 | DType::BF16 | DType::F64 => t
                .to_dtype(DType::F32)
                .map_err(|e| model_err(path, format!("tensor {name}: cannot convert to f32: {e}")))?,
            _ => t, // integer buffers (e.g. position_ids) are never read as weights
        };
        out.insert(name, t);
    }
    Ok(out)
}
