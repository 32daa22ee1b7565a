//! The optional linear layer after BERT (ColBERT's `linear`, or a sentence-transformers `Dense`).
//!
//! Found in this order:
//! 1. a `linear.weight` tensor (and optional `linear.bias`) in the model's own `model.safetensors`,
//!    as colbert-ai checkpoints store it; no activation;
//! 2. a sentence-transformers `Dense` module (or PyLate's `pylate.models.Dense.Dense`, without
//!    its residual option): the first such module in
//!    `modules.json` (or, without `modules.json`, a sub-directory named `*_Dense`), read from its
//!    `model.safetensors` (`linear.weight`, optional `linear.bias`) and `config.json`
//!    (`activation_function` Identity or Tanh). More than one Dense module is refused.

use std::path::{Path, PathBuf};

use candle_core::Tensor;
use cellar_core::Result;
use serde::Deserialize;

use crate::errors::model_err;
use crate::ops::{Act, BiasAct};
use crate::weights::Weights;

/// A linear map `hidden -> out_dim`, with optional bias and activation.
pub(crate) struct Projection {
    /// The weight as stored, `(out, in)`, row-major, for single vectors.
    weight: Vec<f32>,
    /// The weight transposed, `(in, out)`, for batches of rows.
    weight_t: Tensor,
    /// One value per output, if the layer has a bias.
    bias: Option<Vec<f32>>,
    /// Applied after the bias.
    act: Act,
    /// Output width.
    pub out_dim: usize,
}

/// The bits of a sentence-transformers `Dense` `config.json` we read.
#[derive(Deserialize)]
struct DenseConfig {
    #[serde(default)]
    activation_function: Option<String>,
    /// PyLate's residual Dense (output + input), not supported.
    #[serde(default)]
    use_residual: bool,
}

/// One entry of a sentence-transformers `modules.json`.
#[derive(Deserialize)]
struct Module {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

impl Projection {
    /// Finds and loads the projection of the model in `dir` (see the module docs), if any.
    pub fn find(dir: &Path, bert: &Weights, hidden: usize) -> Result<Option<Projection>> {
        if bert.has("linear.weight") {
            return Projection::from_weights(bert, hidden, Act::Identity).map(Some);
        }
        let Some(dense_dir) = dense_dir(dir)? else { return Ok(None) };
        let cfg_path = dense_dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path)
            .map_err(|e| model_err(&cfg_path, format!("cannot read: {e}")))?;
        let cfg: DenseConfig =
            serde_json::from_str(&text).map_err(|e| model_err(&cfg_path, e.to_string()))?;
        if cfg.use_residual {
            return Err(model_err(&cfg_path, "a residual Dense (use_residual) is not supported"));
        }
        let act = match cfg.activation_function.as_deref().unwrap_or("torch.nn.modules.activation.Tanh") {
            a if a.ends_with("Identity") => Act::Identity,
            a if a.ends_with("Tanh") => Act::Tanh,
            a => {
                return Err(model_err(
                    &cfg_path,
                    format!("Dense activation {a} is not supported (Identity, Tanh)"),
                ))
            }
        };
        let w = Weights::load_plain(&dense_dir.join("model.safetensors"))?;
        Projection::from_weights(&w, hidden, act).map(Some)
    }

    /// Builds the layer from `linear.weight` / `linear.bias` in `w`.
    fn from_weights(w: &Weights, hidden: usize, act: Act) -> Result<Projection> {
        let bad = |d: String| model_err(w.path(), d);
        let weight = w.raw("linear.weight")?.ok_or_else(|| bad("missing tensor linear.weight".into()))?;
        let (out_dim, inp) = weight.dims2().map_err(|e| bad(format!("linear.weight: {e}")))?;
        if inp != hidden || out_dim == 0 {
            return Err(bad(format!(
                "linear.weight is {out_dim}x{inp}, the encoder's hidden size is {hidden}"
            )));
        }
        let flat = weight.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(|e| bad(e.to_string()))?;
        let weight_t = weight.t().and_then(|t| t.contiguous()).map_err(|e| bad(e.to_string()))?;
        let bias = match w.raw("linear.bias")? {
            Some(b) => Some(b.to_vec1::<f32>().map_err(|e| bad(format!("linear.bias: {e}")))?),
            None => None,
        };
        if bias.as_ref().is_some_and(|b| b.len() != out_dim) {
            return Err(bad(format!("linear.bias does not have {out_dim} values")));
        }
        Ok(Projection { weight: flat, weight_t, bias, act, out_dim })
    }

    /// Projects every row of `x`, `(rows, hidden)` -> `(rows, out_dim)`.
    pub fn rows(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = x.matmul(&self.weight_t)?;
        y.inplace_op1(&BiasAct { bias: self.bias.as_deref(), act: self.act })?;
        Ok(y)
    }

    /// Projects one vector of `hidden` values.
    pub fn one(&self, v: &[f32]) -> Vec<f32> {
        let inp = v.len();
        (0..self.out_dim)
            .map(|o| {
                let dot: f32 = self.weight[o * inp..][..inp].iter().zip(v).map(|(a, b)| a * b).sum();
                self.act.apply(dot + self.bias.as_ref().map_or(0.0, |b| b[o]))
            })
            .collect()
    }
}

/// The directory of the model's sentence-transformers `Dense` module, if it has one.
fn dense_dir(dir: &Path) -> Result<Option<PathBuf>> {
    let modules_path = dir.join("modules.json");
    let found: Vec<PathBuf> = if modules_path.is_file() {
        let text = std::fs::read_to_string(&modules_path)
            .map_err(|e| model_err(&modules_path, format!("cannot read: {e}")))?;
        let modules: Vec<Module> =
            serde_json::from_str(&text).map_err(|e| model_err(&modules_path, e.to_string()))?;
        let dense = |kind: &str| kind.ends_with("models.Dense") || kind.ends_with("models.Dense.Dense");
        modules.into_iter().filter(|m| dense(&m.kind)).map(|m| dir.join(m.path)).collect()
    } else {
        let entries = std::fs::read_dir(dir).map_err(|e| model_err(dir, format!("cannot list: {e}")))?;
        let mut v: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().ends_with("_Dense")))
            .collect();
        v.sort();
        v
    };
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.into_iter().next()),
        n => Err(model_err(dir, format!("{n} Dense modules; only a single projection is supported"))),
    }
}
