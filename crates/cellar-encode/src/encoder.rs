//! The public encoder: text in, L2-normalised token vectors and a pooled vector out.

use std::path::Path;

use candle_core::Tensor;
use cellar_core::{CellarError, Result};

use crate::bert::Bert;
use crate::colbert::Colbert;
use crate::config::{BertConfig, EncoderConfig, Overflow};
use crate::errors::{invalid, model_err, tensor_err};
use crate::modernbert::{is_modernbert, ModernBert, ModernBertConfig};
use crate::projection::Projection;
use crate::threads::Pools;
use crate::tokenize::{SkipRules, TokenSeq, Tokenized, Tokenizers};
use crate::weights::Weights;

/// The vectors of one encoded text.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// `n_tokens * dim` values, row-major; each row is one kept token's vector, L2-normalised.
    /// Padding is never included; skipped tokens (see [`EncoderConfig`]) are left out.
    pub tokens: Vec<f32>,
    /// Rows in `tokens`. Never 0: when every token would be skipped, all of them are kept.
    pub n_tokens: usize,
    /// `dim` values: the mean of the states of all real tokens ([CLS] and [SEP] included, as in
    /// sentence-transformers mean pooling), projected if the model has a projection, L2-normalised.
    /// Over several windows: the mean of every window's states.
    pub pooled: Vec<f32>,
    /// Tokens the text had, [CLS] and [SEP] included, before any cut.
    pub text_tokens: usize,
    /// Forward passes the text took: 1, or the windows of a text past its limit.
    pub windows: usize,
    /// Tokens cut off the text's end (a text past its limit under [`Overflow::Truncate`]).
    pub tokens_cut: usize,
    /// A document split into passages ([`Overflow::Passages`]): where each passage's rows end
    /// in `tokens` (increasing, the last `n_tokens`; passages that kept no token left out).
    /// Empty for a text of one passage.
    pub passages: Vec<u32>,
}

/// A loaded checkpoint. `Send + Sync`: share one between threads with `Arc<Encoder>`; each call
/// uses at most `config.threads` threads of its own.
pub struct Encoder {
    /// What it was loaded with.
    config: EncoderConfig,
    /// The transformer.
    net: Network,
    /// The linear layer after it, if the checkpoint has one.
    projection: Option<Projection>,
    /// The tokenizer, without truncation.
    tokenizers: Tokenizers,
    /// Longest window of a query and of a document, special tokens included.
    limits: (usize, usize),
    /// A ColBERT checkpoint's prefixes, expansion and skiplist (PyLate's layout), if it is one.
    colbert: Option<Colbert>,
    /// Per-call thread pools.
    pools: Pools,
    /// Human-readable checkpoint name.
    name: String,
}

impl Encoder {
    /// Loads `config.json`, `model.safetensors`, `tokenizer.json` (and any projection) from
    /// `config.model_dir`. Missing or unusable files are `CellarError::Model` naming the file; bad
    /// options (zero threads or batch, limits outside `3..=max_position_embeddings`) are
    /// `CellarError::InvalidInput`.
    pub fn load(config: EncoderConfig) -> Result<Encoder> {
        let dir = config.model_dir.clone();
        if !dir.is_dir() {
            return Err(model_err(&dir, "model directory not found"));
        }
        if config.threads == 0 || config.batch_size == 0 {
            return Err(invalid("threads and batch_size must be at least 1"));
        }
        let name = model_name(&dir);
        let (net, weights, summary) = if is_modernbert(&dir) {
            let cfg = ModernBertConfig::load(&dir)?;
            let weights = Weights::load_plain(&dir.join("model.safetensors"))?;
            let summary =
                format!("{name} (ModernBERT): {} layers, hidden {}", cfg.num_hidden_layers, cfg.hidden_size);
            (Network::ModernBert(ModernBert::load(cfg, &weights, config.weights)?), weights, summary)
        } else {
            let cfg = BertConfig::load(&dir)?;
            let weights = Weights::load_bert(&dir.join("model.safetensors"))?;
            let summary = format!(
                "{name} (base {}): {} layers, hidden {}",
                cfg.name_or_path.as_deref().unwrap_or("?"),
                cfg.num_hidden_layers,
                cfg.hidden_size
            );
            (Network::Bert(Bert::load(cfg, &weights, config.weights)?), weights, summary)
        };
        let (hidden, vocab, max_positions) = net.shape();
        let projection = Projection::find(&dir, &weights, hidden)?;
        drop(weights);
        let tokenizers = Tokenizers::load(&dir)?;
        let colbert = Colbert::find(&dir, |t| tokenizers.token_to_id(t))?;
        let limits = match &colbert {
            Some(c) => {
                if c.query_length.max(c.document_length) > max_positions {
                    let detail = format!(
                        "query_length {} / document_length {}: this model takes {max_positions} tokens",
                        c.query_length, c.document_length
                    );
                    return Err(model_err(&dir.join(crate::colbert::ST_CONFIG), detail));
                }
                log::info!("ColBERT checkpoint: {c:?}");
                c.limits()
            }
            None => {
                check_limits(&config, max_positions)?;
                (config.query_max_tokens, config.doc_max_tokens)
            }
        };
        if tokenizers.vocab_size() > vocab {
            let detail = format!("tokenizer has {} tokens, the model only {vocab}", tokenizers.vocab_size());
            return Err(model_err(&dir.join("tokenizer.json"), detail));
        }
        let pools = Pools::new(config.threads);
        log::info!(
            "loaded encoder {summary}, output dim {}",
            projection.as_ref().map_or(hidden, |p| p.out_dim)
        );
        Ok(Encoder { config, net, projection, tokenizers, limits, colbert, pools, name })
    }

    /// Width of every output vector (the projection's output if there is one, else hidden size).
    pub fn dim(&self) -> usize {
        self.projection.as_ref().map_or(self.net.shape().0, |p| p.out_dim)
    }

    /// The checkpoint's name: its directory's name (with the parent's when the name is generic
    /// like `model`), or `org/name` for a Hugging Face cache directory.
    pub fn model_name(&self) -> String {
        self.name.clone()
    }

    /// The options it was loaded with.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// Tokens `text` has, [CLS] and [SEP] included, before any limit.
    pub fn tokens_of(&self, text: &str) -> Result<usize> {
        Ok(self.tokenize(text, Kind::Doc)?.total)
    }

    /// `text` tokenised as `kind` into its windows, each shaped as a ColBERT checkpoint's
    /// library shapes a text. A query past its limit is windowed, but a ColBERT checkpoint's,
    /// which is cut at its `query_length` as its library does; a document follows
    /// `doc_overflow`.
    fn tokenize(&self, text: &str, kind: Kind) -> Result<Tokenized> {
        let (limit, overflow) = match kind {
            Kind::Query if self.colbert.is_some() => (self.limits.0, Overflow::Truncate),
            Kind::Query => (self.limits.0, Overflow::Windows),
            Kind::Doc => (self.limits.1, self.config.doc_overflow),
        };
        let mut tokenized = self.tokenizers.encode(text, limit, overflow, self.skip_rules())?;
        if let Some(c) = &self.colbert {
            for seq in &mut tokenized.windows {
                let (ids, attend, keep) = c.shape(std::mem::take(&mut seq.ids), kind == Kind::Query);
                *seq = TokenSeq { ids, attend, keep };
            }
        }
        Ok(tokenized)
    }

    /// The checkpoint's ColBERT settings (PyLate layout), if it has them.
    pub fn is_colbert(&self) -> bool {
        self.colbert.is_some()
    }

    /// Encodes one query: whole, in overlapping windows of `query_max_tokens` when it is longer
    /// (a ColBERT checkpoint's cut at its `query_length`, see [`Encoded::tokens_cut`]). Empty or
    /// whitespace-only text is `CellarError::InvalidInput`.
    pub fn encode_query(&self, text: &str) -> Result<Encoded> {
        if text.trim().is_empty() {
            return Err(invalid("empty query"));
        }
        self.encode_all(vec![self.tokenize(text, Kind::Query)?]).map(|mut out| out.remove(0))
    }

    /// Encodes documents (each past `doc_max_tokens` cut or windowed, as `doc_overflow` says;
    /// empty text is allowed). Sorts the windows by length to limit padding and runs up to
    /// `batch_size` per forward pass (fewer when that would exceed 2048 padded tokens); the
    /// result is in input order.
    pub fn encode_docs(&self, texts: &[&str]) -> Result<Vec<Encoded>> {
        let texts = texts.iter().map(|t| self.tokenize(t, Kind::Doc)).collect::<Result<Vec<_>>>()?;
        self.encode_all(texts)
    }

    /// Runs every window of `texts` through the network and puts each text together again.
    fn encode_all(&self, texts: Vec<Tokenized>) -> Result<Vec<Encoded>> {
        let seqs: Vec<&TokenSeq> = texts.iter().flat_map(|t| &t.windows).collect();
        let mut order: Vec<usize> = (0..seqs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(seqs[i].ids.len()));
        let mut out: Vec<Option<Window>> = seqs.iter().map(|_| None).collect();
        self.pools.run(|| -> Result<()> {
            for chunk in passes(&order, &seqs, self.config.batch_size) {
                let batch: Vec<&TokenSeq> = chunk.iter().map(|&i| seqs[i]).collect();
                for (&i, window) in chunk.iter().zip(self.run_batch(&batch)?) {
                    out[i] = Some(window);
                }
            }
            Ok(())
        })??;
        let mut windows =
            out.into_iter().map(|w| w.ok_or_else(|| CellarError::internal("a window was not encoded")));
        texts
            .iter()
            .map(|t| {
                let parts = windows.by_ref().take(t.windows.len()).collect::<Result<Vec<Window>>>()?;
                Ok(self.combine(parts, t))
            })
            .collect()
    }

    fn skip_rules(&self) -> SkipRules {
        SkipRules { special: self.config.skip_special, punctuation: self.config.skip_punctuation }
    }

    /// One forward pass over `seqs`, padded to the longest; results in the same order.
    fn run_batch(&self, seqs: &[&TokenSeq]) -> Result<Vec<Window>> {
        let seq_len = seqs.iter().map(|s| s.ids.len()).max().unwrap_or(0);
        if seq_len == 0 {
            return Ok(Vec::new());
        }
        let lens: Vec<usize> = seqs.iter().map(|s| s.attend).collect();
        let mut ids = vec![0u32; seqs.len() * seq_len];
        for (row, s) in ids.chunks_mut(seq_len).zip(seqs) {
            row[..s.ids.len()].copy_from_slice(&s.ids);
        }
        let dir = &self.config.model_dir;
        let hidden = self.net.forward(&ids, seq_len, &lens).map_err(|e| tensor_err(dir, e))?;
        let projected = match &self.projection {
            Some(p) => Some(p.rows(&hidden).and_then(|t| flat(&t)).map_err(|e| tensor_err(dir, e))?),
            None => None,
        };
        let hidden = flat(&hidden).map_err(|e| tensor_err(dir, e))?;
        let h = self.net.shape().0;
        // The first `n` rows of sequence `b` in a `(batch * seq_len, width)` matrix.
        fn rows_of(v: &[f32], seq_len: usize, width: usize, b: usize, n: usize) -> &[f32] {
            &v[b * seq_len * width..][..n * width]
        }
        let encoded = seqs.iter().enumerate().map(|(b, s)| {
            let states = rows_of(&hidden, seq_len, h, b, s.attend);
            let tokens = match &projected {
                Some(p) => rows_of(p, seq_len, self.dim(), b, s.ids.len()),
                None => rows_of(&hidden, seq_len, h, b, s.ids.len()),
            };
            self.window(states, tokens, &s.keep)
        });
        Ok(encoded.collect())
    }

    /// What one window gives its text: the sum of its hidden `states` and its kept, normalised
    /// (projected) token `rows`.
    fn window(&self, states: &[f32], rows: &[f32], keep: &[bool]) -> Window {
        let (h, dim) = (self.net.shape().0, self.dim());
        let mut state_sum = vec![0f32; h];
        for row in states.chunks_exact(h) {
            state_sum.iter_mut().zip(row).for_each(|(m, v)| *m += v);
        }
        let mut tokens = Vec::with_capacity(rows.len());
        for (row, _) in rows.chunks_exact(dim).zip(keep).filter(|(_, &k)| k) {
            let start = tokens.len();
            tokens.extend_from_slice(row);
            normalize(&mut tokens[start..]);
        }
        Window { state_sum, states: states.len() / h, tokens }
    }

    /// One text's output from its windows, in order: their kept token vectors one after the
    /// other, and the mean of all their states, projected and normalised. A single window's
    /// vectors are moved, not copied.
    fn combine(&self, windows: Vec<Window>, text: &Tokenized) -> Encoded {
        let (mut sum, mut count, mut tokens) = (Vec::new(), 0, Vec::new());
        let mut passages: Vec<u32> = Vec::new();
        for w in windows {
            if sum.is_empty() {
                (sum, tokens) = (w.state_sum, w.tokens);
            } else {
                sum.iter_mut().zip(&w.state_sum).for_each(|(s, v)| *s += v);
                tokens.extend(w.tokens);
            }
            count += w.states;
            let end = (tokens.len() / self.dim()) as u32;
            if text.passages && passages.last().is_none_or(|&last| end > last) && end > 0 {
                passages.push(end);
            }
        }
        if passages.len() < 2 {
            passages.clear();
        }
        let inv = 1.0 / count.max(1) as f32;
        sum.iter_mut().for_each(|m| *m *= inv);
        let mut pooled = match &self.projection {
            Some(p) => p.one(&sum),
            None => sum,
        };
        normalize(&mut pooled);
        let n_tokens = tokens.len() / self.dim();
        Encoded {
            tokens,
            n_tokens,
            pooled,
            text_tokens: text.total,
            windows: text.windows.len(),
            tokens_cut: text.cut,
            passages,
        }
    }
}

/// One window's part of its text's output (see [`Encoder::combine`]).
struct Window {
    state_sum: Vec<f32>,
    states: usize,
    tokens: Vec<f32>,
}

/// Which input kind is being tokenised; each has its own limit and overflow rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Query,
    Doc,
}

/// The transformer of a checkpoint: BERT, or ModernBERT (`config.json`'s `model_type`).
enum Network {
    Bert(Bert),
    ModernBert(ModernBert),
}

impl Network {
    /// Hidden size, vocabulary size, longest input.
    fn shape(&self) -> (usize, usize, usize) {
        match self {
            Network::Bert(b) => (b.cfg.hidden_size, b.cfg.vocab_size, b.cfg.max_position_embeddings),
            Network::ModernBert(m) => (m.cfg.hidden_size, m.cfg.vocab_size, m.cfg.max_position_embeddings),
        }
    }

    fn forward(&self, ids: &[u32], seq: usize, lens: &[usize]) -> candle_core::Result<Tensor> {
        match self {
            Network::Bert(b) => b.forward(ids, seq, lens),
            Network::ModernBert(m) => m.forward(ids, seq, lens),
        }
    }
}

/// Padded tokens per forward pass beyond which a batch is split: bigger passes spill the
/// activations out of cache (SciFact, 1 thread: 32 x 256 tokens per pass ran 15-20% slower than
/// 8 x 256; 1024-2048 was the plateau).
const PASS_TOKENS: usize = 2048;

/// Splits `order` (indices into `seqs`, longest first) into forward passes of at most
/// `batch_size` sequences and, past the first sequence, at most [`PASS_TOKENS`] padded tokens.
pub(crate) fn passes<'a>(order: &'a [usize], seqs: &[&TokenSeq], batch_size: usize) -> Vec<&'a [usize]> {
    let (mut out, mut start) = (Vec::new(), 0);
    while start < order.len() {
        let longest = seqs[order[start]].ids.len().max(1);
        let n = (PASS_TOKENS / longest).clamp(1, batch_size).min(order.len() - start);
        out.push(&order[start..start + n]);
        start += n;
    }
    out
}

/// A 2-D tensor's values, row-major.
fn flat(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

/// Scales `v` to unit L2 norm (a zero vector stays zero).
fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        let inv = 1.0 / norm;
        v.iter_mut().for_each(|x| *x *= inv);
    }
}

/// Rejects token limits the model cannot honour (a ColBERT checkpoint brings its own).
fn check_limits(c: &EncoderConfig, max: usize) -> Result<()> {
    for (what, n) in [("query_max_tokens", c.query_max_tokens), ("doc_max_tokens", c.doc_max_tokens)] {
        if !(3..=max).contains(&n) {
            return Err(invalid(format!("{what} is {n}; this model takes 3..={max} tokens")));
        }
    }
    Ok(())
}

/// A readable name for the checkpoint in `dir` (see [`Encoder::model_name`]).
fn model_name(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let names: Vec<String> = dir.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if let Some(hub) = names.iter().rev().find_map(|n| n.strip_prefix("models--")) {
        return hub.replace("--", "/");
    }
    match names.as_slice() {
        [.., parent, name] if matches!(name.as_str(), "model" | "models" | "checkpoint" | "onnx") => {
            format!("{parent}/{name}")
        }
        [.., name] => name.clone(),
        [] => String::from("unknown"),
    }
}
