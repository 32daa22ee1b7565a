//! A BERT encoder forward pass (inference only) on candle-core tensors.
//!
//! Matrix products go through candle (gemm); everything element-wise runs in the fused kernels of
//! [`crate::ops`]. Sequences of a batch are padded at the end, and the attention softmax gives
//! padding keys probability zero, so a sequence's states do not depend on what it is batched with.

use candle_core::Tensor;
use cellar_core::Result;

use crate::config::BertConfig;
use crate::dense::{Dense, WeightPrecision};
use crate::ops::{Act, AddNorm, BiasAct, LayerNorm, MaskedSoftmax};
use crate::weights::{DiskRows, Weights};

type CResult<T> = candle_core::Result<T>;

/// One transformer block; each weight matrix maps `x` to `x @ w^T` ([`Dense`]).
struct Layer {
    /// Query, key and value projections stacked, `(3 * hidden, hidden)`; the query part is
    /// pre-scaled by `1 / sqrt(head_dim)`.
    qkv_w: Dense,
    /// Their biases, query part pre-scaled the same way.
    qkv_b: Vec<f32>,
    /// Attention output projection, `(hidden, hidden)`.
    out_w: Dense,
    /// Its bias.
    out_b: Vec<f32>,
    /// LayerNorm after the attention residual.
    ln_attn: LayerNorm,
    /// Feed-forward expansion, `(intermediate, hidden)`.
    ff_in_w: Dense,
    /// Its bias.
    ff_in_b: Vec<f32>,
    /// Feed-forward contraction, `(hidden, intermediate)`.
    ff_out_w: Dense,
    /// Its bias.
    ff_out_b: Vec<f32>,
    /// LayerNorm after the feed-forward residual.
    ln_ff: LayerNorm,
}

/// The whole network: embeddings and the layer stack.
pub(crate) struct Bert {
    /// Shapes and sizes from `config.json`.
    pub cfg: BertConfig,
    /// Word embeddings, `(vocab, hidden)`, left in the model file: a batch reads the rows of
    /// its tokens (30,522 x 384 f32 is 45 MiB of all-MiniLM-L6-v2's 87, which a query touches a
    /// few dozen rows of).
    word: DiskRows,
    /// Position embeddings plus the token-type-0 embedding, `(max_positions, hidden)`.
    pos_type: Tensor,
    /// LayerNorm of the embedding sum.
    ln_emb: LayerNorm,
    /// Encoder layers, bottom first.
    layers: Vec<Layer>,
}

/// Tensor-level failures while preparing weights; the caller names the file.
fn prep<T>(w: &Weights, r: CResult<T>) -> Result<T> {
    r.map_err(|e| crate::errors::model_err(w.path(), format!("preparing weights: {e}")))
}

/// The LayerNorm called `name` (`.weight`/`.bias`, or the older `.gamma`/`.beta`).
fn layer_norm(w: &Weights, name: &str, cfg: &BertConfig) -> Result<LayerNorm> {
    let h = cfg.hidden_size;
    let (gamma, beta) = match w.vec(&format!("{name}.weight"), h) {
        Ok(g) => (g, w.vec(&format!("{name}.bias"), h)?),
        Err(e) => match w.vec(&format!("{name}.gamma"), h) {
            Ok(g) => (g, w.vec(&format!("{name}.beta"), h)?),
            Err(_) => return Err(e),
        },
    };
    Ok(LayerNorm { gamma, beta, eps: cfg.layer_norm_eps as f32 })
}

/// A linear layer's weight `(out, inp)` and its bias.
fn linear(w: &Weights, name: &str, inp: usize, out: usize) -> Result<(Tensor, Vec<f32>)> {
    Ok((w.get(&format!("{name}.weight"), &[out, inp])?, w.vec(&format!("{name}.bias"), out)?))
}

impl Layer {
    fn load(w: &Weights, cfg: &BertConfig, i: usize, precision: WeightPrecision) -> Result<Layer> {
        let (h, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let p = format!("encoder.layer.{i}.");
        let scale = 1.0 / (cfg.head_dim() as f64).sqrt();
        let dense = |t: &Tensor| prep(w, Dense::new(t, precision));
        let (q_w, mut q_b) = linear(w, &format!("{p}attention.self.query"), h, h)?;
        let (k_w, k_b) = linear(w, &format!("{p}attention.self.key"), h, h)?;
        let (v_w, v_b) = linear(w, &format!("{p}attention.self.value"), h, h)?;
        let q_w = prep(w, q_w.affine(scale, 0.0))?;
        q_b.iter_mut().for_each(|b| *b *= scale as f32);
        let qkv_w = dense(&prep(w, Tensor::cat(&[&q_w, &k_w, &v_w], 0))?)?;
        let (out_w, out_b) = linear(w, &format!("{p}attention.output.dense"), h, h)?;
        let (ff_in_w, ff_in_b) = linear(w, &format!("{p}intermediate.dense"), h, inter)?;
        let (ff_out_w, ff_out_b) = linear(w, &format!("{p}output.dense"), inter, h)?;
        let (out_w, ff_in_w, ff_out_w) = (dense(&out_w)?, dense(&ff_in_w)?, dense(&ff_out_w)?);
        Ok(Layer {
            qkv_w,
            qkv_b: [q_b, k_b, v_b].concat(),
            out_w,
            out_b,
            ln_attn: layer_norm(w, &format!("{p}attention.output.LayerNorm"), cfg)?,
            ff_in_w,
            ff_in_b,
            ff_out_w,
            ff_out_b,
            ln_ff: layer_norm(w, &format!("{p}output.LayerNorm"), cfg)?,
        })
    }

    /// `x` is `(batch * seq, hidden)`; returns the same shape.
    fn forward(&self, x: &Tensor, cfg: &BertConfig, seq: usize, lens: &[usize]) -> CResult<Tensor> {
        let (batch, heads, hd) = (lens.len(), cfg.num_attention_heads, cfg.head_dim());
        let qkv = self.qkv_w.forward(x)?;
        qkv.inplace_op1(&BiasAct { bias: Some(&self.qkv_b), act: Act::Identity })?;
        // (batch, seq, 3, heads, hd) -> (3, batch, heads, seq, hd): one copy, then q/k/v are views.
        let qkv = qkv.reshape((batch, seq, 3, heads, hd))?.permute((2, 0, 3, 1, 4))?.contiguous()?;
        let ctx = attention(&qkv.get(0)?, &qkv.get(1)?, &qkv.get(2)?, lens)?;
        let ctx = ctx.transpose(1, 2)?.contiguous()?.reshape((batch * seq, heads * hd))?;
        let attn = self.out_w.forward(&ctx)?;
        attn.inplace_op2(x, &AddNorm { bias: Some(&self.out_b), norm: &self.ln_attn })?;
        let ff = self.ff_in_w.forward(&attn)?;
        ff.inplace_op1(&BiasAct { bias: Some(&self.ff_in_b), act: Act::Gelu })?;
        let out = self.ff_out_w.forward(&ff)?;
        out.inplace_op2(&attn, &AddNorm { bias: Some(&self.ff_out_b), norm: &self.ln_ff })?;
        Ok(out)
    }
}

/// Bytes of attention scores computed at once: a few sequences at a time keep the scores in cache
/// (one `(batch, heads, seq, seq)` tensor for a batch of 32 long documents is ~100 MB and made
/// the whole pass ~25% slower).
const SCORES_BUDGET: usize = 4 << 20;

/// Softmax attention of `(batch, heads, seq, head_dim)` queries, keys and values, a group of
/// sequences at a time; padding keys (beyond `lens[b]`) get no weight.
fn attention(q: &Tensor, k: &Tensor, v: &Tensor, lens: &[usize]) -> CResult<Tensor> {
    let (batch, heads, seq, _) = q.dims4()?;
    let group = (SCORES_BUDGET / (heads * seq * seq * 4)).clamp(1, batch);
    let mut parts = Vec::with_capacity(batch.div_ceil(group));
    for start in (0..batch).step_by(group) {
        let n = group.min(batch - start);
        let probs = q.narrow(0, start, n)?.matmul(&k.narrow(0, start, n)?.t()?)?;
        probs.inplace_op1(&MaskedSoftmax { lens: &lens[start..start + n] })?;
        parts.push(probs.matmul(&v.narrow(0, start, n)?)?);
    }
    Tensor::cat(&parts, 0)
}

impl Bert {
    /// Builds the network from `cfg` and the tensors in `w`, its layers' weight matrices held
    /// at `precision`.
    pub fn load(cfg: BertConfig, w: &Weights, precision: WeightPrecision) -> Result<Bert> {
        let h = cfg.hidden_size;
        let word = w.rows("embeddings.word_embeddings.weight", [cfg.vocab_size, h])?;
        let pos = w.get("embeddings.position_embeddings.weight", &[cfg.max_position_embeddings, h])?;
        let pos_type = match w.get_opt("embeddings.token_type_embeddings.weight")? {
            Some(t) => prep(w, t.narrow(0, 0, 1).and_then(|t0| pos.broadcast_add(&t0)))?,
            None => pos,
        };
        let ln_emb = layer_norm(w, "embeddings.LayerNorm", &cfg)?;
        let layers =
            (0..cfg.num_hidden_layers).map(|i| Layer::load(w, &cfg, i, precision)).collect::<Result<_>>()?;
        Ok(Bert { cfg, word, pos_type, ln_emb, layers })
    }

    /// Runs `batch` sequences of `seq` token ids each (row-major in `ids`, padded at the end;
    /// `lens[b]` real tokens in sequence `b`). Returns the last hidden states, `(batch * seq, hidden)`.
    pub fn forward(&self, ids: &[u32], seq: usize, lens: &[usize]) -> CResult<Tensor> {
        let pos = self.pos_type.narrow(0, 0, seq)?;
        let mut x = self.word.select(ids)?;
        x.inplace_op2(&pos, &AddNorm { bias: None, norm: &self.ln_emb })?;
        for layer in &self.layers {
            x = layer.forward(&x, &self.cfg, seq, lens)?;
        }
        Ok(x)
    }
}
