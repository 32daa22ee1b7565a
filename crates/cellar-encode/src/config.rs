//! The encoder's options and the subset of a Hugging Face `config.json` the forward pass needs.

use std::path::{Path, PathBuf};

use cellar_core::Result;
use serde::{Deserialize, Serialize};

use crate::dense::WeightPrecision;
use crate::errors::model_err;

/// How to load and run an encoder. Build with [`EncoderConfig::new`] and override fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncoderConfig {
    /// Directory holding `config.json`, `model.safetensors` and `tokenizer.json`.
    pub model_dir: PathBuf,
    /// Longest query window in tokens, [CLS] and [SEP] included. A longer query is encoded in
    /// overlapping windows of this length, every token's vector kept (a ColBERT checkpoint's
    /// queries are cut at its `query_length`, as its library does; the cut is reported).
    /// Default 64.
    pub query_max_tokens: usize,
    /// Longest document window in tokens, [CLS] and [SEP] included; what happens past it is
    /// `doc_overflow`. Default 256.
    pub doc_max_tokens: usize,
    /// A document longer than `doc_max_tokens`: cut there, or encoded in overlapping windows.
    /// Default [`Overflow::Truncate`].
    pub doc_overflow: Overflow,
    /// Drop [CLS]/[SEP] (any special token) from the output token vectors. They still go through
    /// the model and into the pooled vector. Default true.
    pub skip_special: bool,
    /// Drop tokens whose text (less a leading `##`) is only Unicode punctuation or symbols.
    /// Default true.
    pub skip_punctuation: bool,
    /// Threads one encode call may use for its matrix products and row kernels. Default 1.
    pub threads: usize,
    /// Most documents per forward pass in [`crate::Encoder::encode_docs`]. Default 32. A pass is
    /// also capped at 2048 padded tokens (long documents run ~8 at a time), which is faster on CPU.
    pub batch_size: usize,
    /// How the BERT layers' weight matrices are held: f32 (the default, the checkpoint's own
    /// arithmetic) or f16 (half their memory, products still in f32).
    pub weights: WeightPrecision,
}

impl EncoderConfig {
    /// The defaults listed on each field, for the checkpoint in `model_dir`.
    pub fn new(model_dir: impl Into<PathBuf>) -> Self {
        EncoderConfig {
            model_dir: model_dir.into(),
            query_max_tokens: 64,
            doc_max_tokens: 256,
            doc_overflow: Overflow::Truncate,
            skip_special: true,
            skip_punctuation: true,
            threads: 1,
            batch_size: 32,
            weights: WeightPrecision::default(),
        }
    }
}

/// What happens to a text longer than its token limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Its first `limit` tokens are encoded, the rest cut (and counted).
    #[default]
    Truncate,
    /// It is encoded in windows of `limit` tokens overlapping by half, every token's vector
    /// kept, taken from the window it is most central in.
    Windows,
    /// It is split into consecutive passages of `limit` tokens, each encoded on its own, every
    /// token kept; the document's score is its best passage's (MaxP). Documents only.
    Passages,
}

impl Overflow {
    pub const ALL: [Overflow; 3] = [Overflow::Truncate, Overflow::Windows, Overflow::Passages];

    pub fn name(self) -> &'static str {
        match self {
            Overflow::Truncate => "truncate",
            Overflow::Windows => "windows",
            Overflow::Passages => "passages",
        }
    }
}

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Overflow {
    type Err = cellar_core::CellarError;

    fn from_str(s: &str) -> Result<Overflow> {
        Overflow::ALL.into_iter().find(|o| o.name() == s).ok_or_else(|| {
            cellar_core::CellarError::InvalidInput(format!("overflow {s:?}: expected truncate or windows"))
        })
    }
}

/// The fields of a BERT `config.json` that shape the network.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BertConfig {
    /// Width of every token state.
    pub hidden_size: usize,
    /// Attention heads per layer; `hidden_size` must divide evenly.
    pub num_attention_heads: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Width of the feed-forward block.
    pub intermediate_size: usize,
    /// Rows of the word-embedding table.
    pub vocab_size: usize,
    /// Rows of the position-embedding table: the longest input the model accepts.
    pub max_position_embeddings: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Activation of the feed-forward block; only the erf GELU is supported.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Only "absolute" position embeddings are supported.
    #[serde(default = "default_pos")]
    pub position_embedding_type: String,
    /// The checkpoint's name as its author saved it, when present.
    #[serde(default, rename = "_name_or_path")]
    pub name_or_path: Option<String>,
}

fn default_eps() -> f64 {
    1e-12
}

fn default_act() -> String {
    "gelu".to_string()
}

fn default_pos() -> String {
    "absolute".to_string()
}

impl BertConfig {
    /// Reads and checks `dir/config.json`.
    pub fn load(dir: &Path) -> Result<BertConfig> {
        let path = dir.join("config.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| model_err(&path, format!("cannot read: {e}")))?;
        let cfg: BertConfig =
            serde_json::from_str(&text).map_err(|e| model_err(&path, format!("not a BERT config: {e}")))?;
        cfg.check(&path)?;
        Ok(cfg)
    }

    fn check(&self, path: &Path) -> Result<()> {
        let bad = |detail: String| Err(model_err(path, detail));
        if self.hidden_size == 0 || self.num_attention_heads == 0 || self.num_hidden_layers == 0 {
            return bad("hidden_size, num_attention_heads and num_hidden_layers must be positive".into());
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !matches!(self.hidden_act.as_str(), "gelu" | "gelu_python") {
            return bad(format!("hidden_act {:?} is not supported (only the erf \"gelu\")", self.hidden_act));
        }
        if self.position_embedding_type != "absolute" {
            return bad(format!(
                "position_embedding_type {:?} is not supported",
                self.position_embedding_type
            ));
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}
