//! A ModernBERT encoder forward pass (inference only), as transformers' `ModernBertModel` computes
//! it: token embeddings and a LayerNorm (no position embeddings); per layer a pre-norm (none
//! before layer 0's attention), rotary attention (rotate-half RoPE, its theta per layer type)
//! that is global on `full_attention` layers and a sliding window of `local_attention / 2` each
//! side (inclusive) on `sliding_attention` ones, a GeGLU feed-forward (`Wi` split into input and
//! gate, erf GELU of the input times the gate); a final LayerNorm. No biases (checkpoints with
//! them are refused). The matrix products go through candle; attention runs row by row.

use std::path::Path;

use candle_core::{Device, Tensor};
use cellar_core::Result;
use serde::Deserialize;

use crate::dense::{Dense, WeightPrecision};
use crate::errors::model_err;
use crate::math::{gelu, layer_norm};
use crate::weights::Weights;

type CResult<T> = candle_core::Result<T>;

/// The fields of a ModernBERT `config.json` that shape the network.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ModernBertConfig {
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_norm_eps")]
    norm_eps: f64,
    #[serde(default = "default_local_attention")]
    local_attention: usize,
    #[serde(default = "default_every")]
    global_attn_every_n_layers: usize,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default)]
    rope_parameters: Option<serde_json::Value>,
    #[serde(default = "default_global_theta")]
    global_rope_theta: f64,
    #[serde(default = "default_local_theta")]
    local_rope_theta: f64,
    #[serde(default = "default_act")]
    hidden_activation: String,
    #[serde(default)]
    norm_bias: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
}

fn default_norm_eps() -> f64 {
    1e-5
}
fn default_local_attention() -> usize {
    128
}
fn default_every() -> usize {
    3
}
fn default_global_theta() -> f64 {
    160_000.0
}
fn default_local_theta() -> f64 {
    10_000.0
}
fn default_act() -> String {
    "gelu".into()
}

/// True when `config.json` in `dir` is a ModernBERT one (`model_type`).
pub(crate) fn is_modernbert(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("config.json")) else { return false };
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("model_type").and_then(|t| t.as_str()).map(|t| t == "modernbert"))
        .unwrap_or(false)
}

impl ModernBertConfig {
    pub fn load(dir: &Path) -> Result<ModernBertConfig> {
        let path = dir.join("config.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| model_err(&path, format!("cannot read: {e}")))?;
        let cfg: ModernBertConfig = serde_json::from_str(&text)
            .map_err(|e| model_err(&path, format!("not a ModernBERT config: {e}")))?;
        let bad = |detail: String| Err(model_err(&path, detail));
        if cfg.hidden_size == 0
            || cfg.num_attention_heads == 0
            || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            return bad("hidden_size must be a positive multiple of num_attention_heads".into());
        }
        if cfg.norm_bias || cfg.attention_bias || cfg.mlp_bias {
            return bad(
                "ModernBERT with biases (norm_bias, attention_bias, mlp_bias) is not supported".into()
            );
        }
        if !matches!(cfg.hidden_activation.as_str(), "gelu" | "gelu_python") {
            return bad(format!(
                "hidden_activation {:?} is not supported (only the erf \"gelu\")",
                cfg.hidden_activation
            ));
        }
        if cfg.layer_types.as_ref().is_some_and(|t| t.len() != cfg.num_hidden_layers) {
            return bad("layer_types does not name every layer".into());
        }
        Ok(cfg)
    }

    fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Whether layer `i` attends globally (else through the sliding window).
    fn is_global(&self, i: usize) -> bool {
        match &self.layer_types {
            Some(types) => types[i] == "full_attention",
            None => i.is_multiple_of(self.global_attn_every_n_layers.max(1)),
        }
    }

    /// RoPE theta of layer `i`: `rope_parameters[<layer type>].rope_theta`, else the older keys.
    fn theta(&self, i: usize) -> f64 {
        let kind = if self.is_global(i) { "full_attention" } else { "sliding_attention" };
        let given = self.rope_parameters.as_ref().and_then(|p| p.get(kind)).and_then(|p| p.get("rope_theta"));
        given.and_then(|t| t.as_f64()).unwrap_or(if self.is_global(i) {
            self.global_rope_theta
        } else {
            self.local_rope_theta
        })
    }
}

struct Layer {
    /// LayerNorm weight before attention (`None` for layer 0).
    attn_norm: Option<Vec<f32>>,
    /// `(hidden, 3 * hidden)`, for `x @ w`.
    wqkv: Dense,
    wo: Dense,
    mlp_norm: Vec<f32>,
    /// `(hidden, 2 * intermediate)`: input then gate.
    wi: Dense,
    /// `(intermediate, hidden)`.
    wo_mlp: Dense,
    global: bool,
    /// `cos` and `sin` per position and rotary pair, `(max_positions, head_dim / 2)`.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

pub(crate) struct ModernBert {
    pub cfg: ModernBertConfig,
    tok: Tensor,
    emb_norm: Vec<f32>,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
}

impl ModernBert {
    /// The network of `w`, its four matrices per layer held at `precision`.
    pub fn load(cfg: ModernBertConfig, w: &Weights, precision: WeightPrecision) -> Result<ModernBert> {
        let (h, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let prefix = if w.has("model.embeddings.tok_embeddings.weight") { "model." } else { "" };
        let get = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let full = format!("{prefix}{name}");
            let t = w.raw(&full)?.ok_or_else(|| model_err(w.path(), format!("missing tensor {full}")))?;
            if t.dims() != shape {
                return Err(model_err(
                    w.path(),
                    format!("tensor {full} has shape {:?}, expected {shape:?}", t.dims()),
                ));
            }
            Ok(t)
        };
        let vec = |name: &str| -> Result<Vec<f32>> {
            get(name, &[h])?.to_vec1::<f32>().map_err(|e| model_err(w.path(), e.to_string()))
        };
        let dense = |name: &str, shape: &[usize]| -> Result<Dense> {
            Dense::new(&get(name, shape)?, precision)
                .map_err(|e| model_err(w.path(), format!("preparing weights: {e}")))
        };
        let hd = cfg.head_dim();
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("layers.{i}.");
            let theta = cfg.theta(i);
            let half = hd / 2;
            let (mut cos, mut sin) = (Vec::new(), Vec::new());
            for pos in 0..cfg.max_position_embeddings {
                for k in 0..half {
                    let inv_freq = 1.0 / (theta as f32).powf((2 * k) as f32 / hd as f32);
                    let angle = pos as f32 * inv_freq;
                    cos.push(angle.cos());
                    sin.push(angle.sin());
                }
            }
            layers.push(Layer {
                attn_norm: if i == 0 { None } else { Some(vec(&format!("{p}attn_norm.weight"))?) },
                wqkv: dense(&format!("{p}attn.Wqkv.weight"), &[3 * h, h])?,
                wo: dense(&format!("{p}attn.Wo.weight"), &[h, h])?,
                mlp_norm: vec(&format!("{p}mlp_norm.weight"))?,
                wi: dense(&format!("{p}mlp.Wi.weight"), &[2 * inter, h])?,
                wo_mlp: dense(&format!("{p}mlp.Wo.weight"), &[h, inter])?,
                global: cfg.is_global(i),
                cos,
                sin,
            });
        }
        Ok(ModernBert {
            tok: get("embeddings.tok_embeddings.weight", &[cfg.vocab_size, h])?,
            emb_norm: vec("embeddings.norm.weight")?,
            final_norm: vec("final_norm.weight")?,
            layers,
            cfg,
        })
    }

    /// Runs `lens.len()` sequences of `seq` ids each (padded at the end; `lens[b]` of them are
    /// attended to). Returns the last hidden states, `(batch * seq, hidden)`.
    pub fn forward(&self, ids: &[u32], seq: usize, lens: &[usize]) -> CResult<Tensor> {
        let h = self.cfg.hidden_size;
        let eps = self.cfg.norm_eps as f32;
        let zeros = vec![0f32; h];
        let norm = |rows: &mut [f32], gamma: &[f32]| {
            rows.chunks_exact_mut(h).for_each(|r| layer_norm(r, gamma, &zeros, eps))
        };
        let index = Tensor::from_slice(ids, ids.len(), &Device::Cpu)?;
        let mut x = self.tok.index_select(&index, 0)?.flatten_all()?.to_vec1::<f32>()?;
        norm(&mut x, &self.emb_norm);
        let rows = ids.len();
        for layer in &self.layers {
            let mut a = x.clone();
            if let Some(gamma) = &layer.attn_norm {
                norm(&mut a, gamma);
            }
            let qkv = matmul(&a, rows, h, &layer.wqkv)?;
            let ctx = self.attention(&qkv, seq, lens, layer);
            let out = matmul(&ctx, rows, h, &layer.wo)?;
            x.iter_mut().zip(&out).for_each(|(x, o)| *x += o);
            let mut m = x.clone();
            norm(&mut m, &layer.mlp_norm);
            let wi = matmul(&m, rows, h, &layer.wi)?;
            let inter = self.cfg.intermediate_size;
            let mut act = Vec::with_capacity(rows * inter);
            for row in wi.chunks_exact(2 * inter) {
                let (input, gate) = row.split_at(inter);
                act.extend(input.iter().zip(gate).map(|(i, g)| gelu(*i) * g));
            }
            let out = matmul(&act, rows, inter, &layer.wo_mlp)?;
            x.iter_mut().zip(&out).for_each(|(x, o)| *x += o);
        }
        norm(&mut x, &self.final_norm);
        Tensor::from_vec(x, (rows, h), &Device::Cpu)
    }

    /// Softmax attention of one layer from its `qkv` rows (`(rows, 3, heads, head_dim)`),
    /// RoPE applied to queries and keys; returns `(rows, hidden)`.
    fn attention(&self, qkv: &[f32], seq: usize, lens: &[usize], layer: &Layer) -> Vec<f32> {
        let (h, heads, hd) = (self.cfg.hidden_size, self.cfg.num_attention_heads, self.cfg.head_dim());
        let half = hd / 2;
        let window = self.cfg.local_attention / 2;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut ctx = vec![0f32; lens.len() * seq * h];
        let rope = |v: &[f32], pos: usize| -> Vec<f32> {
            let (c, s) = (&layer.cos[pos * half..][..half], &layer.sin[pos * half..][..half]);
            let mut out = vec![0f32; hd];
            for k in 0..half {
                out[k] = v[k] * c[k] - v[k + half] * s[k];
                out[k + half] = v[k + half] * c[k] + v[k] * s[k];
            }
            out
        };
        for (b, &len) in lens.iter().enumerate() {
            for head in 0..heads {
                let part =
                    |pos: usize, which: usize| &qkv[((b * seq + pos) * 3 + which) * h + head * hd..][..hd];
                let keys: Vec<Vec<f32>> = (0..seq).map(|j| rope(part(j, 1), j)).collect();
                for i in 0..seq {
                    let q = rope(part(i, 0), i);
                    let allowed = |j: usize| j < len && (layer.global || i.abs_diff(j) <= window);
                    let mut scores: Vec<f32> = (0..seq)
                        .map(|j| match allowed(j) {
                            true => q.iter().zip(&keys[j]).map(|(a, b)| a * b).sum::<f32>() * scale,
                            false => f32::NEG_INFINITY,
                        })
                        .collect();
                    masked_softmax(&mut scores);
                    let out = &mut ctx[(b * seq + i) * h + head * hd..][..hd];
                    for (j, p) in scores.iter().enumerate().filter(|(_, p)| **p > 0.0) {
                        out.iter_mut().zip(part(j, 2)).for_each(|(o, v)| *o += p * v);
                    }
                }
            }
        }
        ctx
    }
}

/// `x` (`rows x inner`, row-major) times the layer `w` (`inner -> out`), row-major.
fn matmul(x: &[f32], rows: usize, inner: usize, w: &Dense) -> CResult<Vec<f32>> {
    w.forward(&Tensor::from_slice(x, (rows, inner), &Device::Cpu)?)?.flatten_all()?.to_vec1::<f32>()
}

/// Softmax over the finite entries of `row`; the others (masked out) become 0.
fn masked_softmax(row: &mut [f32]) {
    let m = row.iter().copied().filter(|v| v.is_finite()).fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0f32;
    for v in row.iter_mut() {
        *v = if v.is_finite() { (*v - m).exp() } else { 0.0 };
        total += *v;
    }
    row.iter_mut().for_each(|v| *v /= total);
}
