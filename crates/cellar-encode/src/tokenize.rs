//! Tokenisation (Hugging Face `tokenizer.json`), the per-token keep/skip decision, and what
//! happens to a text longer than its limit ([`Overflow`]): cut, or split into overlapping
//! windows whose token vectors are all kept.

use std::path::Path;

use cellar_core::Result;
use tokenizers::Tokenizer;
use unicode_categories::UnicodeCategories;

use crate::config::Overflow;
use crate::errors::model_err;

/// One tokenised window of a text: what one forward pass sees.
#[derive(Debug, Clone)]
pub(crate) struct TokenSeq {
    /// Token ids, [CLS] and [SEP] included, at most the limit.
    pub ids: Vec<u32>,
    /// How many of `ids`, from the first, other tokens attend to (all but a ColBERT query's
    /// [MASK] expansion).
    pub attend: usize,
    /// Whether each token's vector goes into the output.
    pub keep: Vec<bool>,
}

/// A text as the model sees it: one window, or (past the limit, with [`Overflow::Windows`])
/// several overlapping ones; each token's vector comes from the window it is most central in.
#[derive(Debug, Clone)]
pub(crate) struct Tokenized {
    pub windows: Vec<TokenSeq>,
    /// Tokens the text had, [CLS] and [SEP] included.
    pub total: usize,
    /// Tokens cut off its end ([`Overflow::Truncate`] past the limit); 0 otherwise.
    pub cut: usize,
    /// Its windows are passages ([`Overflow::Passages`] past the limit): consecutive, each
    /// token in one, scored apart.
    pub passages: bool,
}

/// What to drop from the output token vectors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkipRules {
    /// Drop special tokens ([CLS], [SEP]).
    pub special: bool,
    /// Drop tokens made only of punctuation and symbols.
    pub punctuation: bool,
}

/// The checkpoint's tokenizer, without truncation or padding: limits are applied by
/// [`Tokenizers::encode`], which knows what it cut.
pub(crate) struct Tokenizers {
    whole: Tokenizer,
}

impl Tokenizers {
    /// Loads `dir/tokenizer.json` (its own truncation and padding settings switched off).
    pub fn load(dir: &Path) -> Result<Tokenizers> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(model_err(&path, "missing (a model directory needs tokenizer.json)"));
        }
        let mut whole =
            Tokenizer::from_file(&path).map_err(|e| model_err(&path, format!("unreadable: {e}")))?;
        whole
            .with_padding(None)
            .with_truncation(None)
            .map_err(|e| model_err(&path, format!("cannot switch truncation off: {e}")))?;
        Ok(Tokenizers { whole })
    }

    /// Largest id the tokenizer can produce, plus one.
    pub fn vocab_size(&self) -> usize {
        self.whole.get_vocab_size(true)
    }

    /// Tokenises `text` into windows of at most `limit` tokens (special tokens included),
    /// deciding per token whether its vector is kept. Past the limit, [`Overflow::Truncate`]
    /// keeps the first `limit` tokens (the tokenizer library's own right truncation: the
    /// special tokens kept, the content cut); [`Overflow::Windows`] covers the whole text with
    /// windows of the same length overlapping by half.
    pub fn encode(&self, text: &str, limit: usize, overflow: Overflow, skip: SkipRules) -> Result<Tokenized> {
        let enc = self
            .whole
            .encode(text, true)
            .map_err(|e| cellar_core::CellarError::InvalidInput(format!("cannot tokenise text: {e}")))?;
        let special = enc.get_special_tokens_mask();
        let keep: Vec<bool> = enc
            .get_tokens()
            .iter()
            .zip(special)
            .map(|(t, &s)| !((skip.special && s != 0) || (skip.punctuation && is_punctuation(t))))
            .collect();
        let ids = enc.get_ids();
        let total = ids.len();
        if total <= limit {
            let windows = vec![TokenSeq { ids: ids.to_vec(), attend: total, keep }];
            return Ok(Tokenized { windows: keep_some(windows), total, cut: 0, passages: false });
        }
        // [CLS] … [SEP]: the special tokens at either end frame every window.
        let lead = special.iter().take_while(|&&s| s != 0).count().min(total);
        let trail = special[lead..].iter().rev().take_while(|&&s| s != 0).count();
        let content = lead..total - trail;
        let width = limit.saturating_sub(lead + trail).max(1);
        let starts = match overflow {
            Overflow::Truncate => vec![0],
            Overflow::Windows => window_starts(content.len(), width),
            Overflow::Passages => (0..content.len()).step_by(width).collect(),
        };
        let passages = overflow == Overflow::Passages;
        let centre = |start: usize| start + width / 2;
        let windows: Vec<TokenSeq> = starts
            .iter()
            .enumerate()
            .map(|(w, &start)| {
                let end = (start + width).min(content.len());
                let mut seq =
                    TokenSeq { ids: Vec::with_capacity(limit), attend: 0, keep: Vec::with_capacity(limit) };
                let mut push = |at: usize, kept: bool| {
                    seq.ids.push(ids[at]);
                    seq.keep.push(kept);
                };
                (0..lead).for_each(|at| push(at, keep[at]));
                for p in start..end {
                    // The token's vector comes from the window whose centre is nearest (a
                    // passage holds its tokens alone).
                    let owner = if passages {
                        w
                    } else {
                        (0..starts.len())
                            .min_by_key(|&o| centre(starts[o]).abs_diff(p))
                            .expect("at least one window")
                    };
                    push(content.start + p, keep[content.start + p] && owner == w);
                }
                (content.end..total).for_each(|at| push(at, keep[at]));
                seq.attend = seq.ids.len();
                seq
            })
            .collect();
        let cut = match overflow {
            Overflow::Truncate => content.len().saturating_sub(width),
            Overflow::Windows | Overflow::Passages => 0,
        };
        Ok(Tokenized { windows: keep_some(windows), total, cut, passages })
    }

    /// The id of `token` (added tokens included), as `convert_tokens_to_ids` finds it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.whole.token_to_id(token)
    }
}

/// `windows`, with every token kept when none would be: a text's output is never empty.
fn keep_some(mut windows: Vec<TokenSeq>) -> Vec<TokenSeq> {
    if !windows.iter().any(|w| w.keep.contains(&true)) {
        windows.iter_mut().for_each(|w| w.keep.fill(true));
    }
    windows
}

/// Where the windows of `width` tokens start over `n` content tokens (`n > width`): every
/// `width / 2` tokens, the last one ending at the text's end.
fn window_starts(n: usize, width: usize) -> Vec<usize> {
    let stride = (width / 2).max(1);
    let mut starts: Vec<usize> = (0..).map(|i| i * stride).take_while(|&s| s + width < n).collect();
    starts.push(n - width);
    starts
}

/// True when the token's text, less a leading `##`, is only Unicode punctuation or symbols.
pub(crate) fn is_punctuation(token: &str) -> bool {
    let s = token.strip_prefix("##").unwrap_or(token);
    !s.is_empty() && s.chars().all(|c| c.is_punctuation() || c.is_symbol())
}

#[cfg(test)]
mod tests {
    use super::{is_punctuation, window_starts};

    #[test]
    fn windows_cover_the_text_overlapping_by_half_and_the_last_ends_at_its_end() {
        assert_eq!(window_starts(11, 10), vec![0, 1]);
        assert_eq!(window_starts(30, 10), vec![0, 5, 10, 15, 20]);
        assert_eq!(window_starts(31, 10), vec![0, 5, 10, 15, 20, 21]);
        assert_eq!(window_starts(3, 1), vec![0, 1, 2]);
        for (n, width) in [(11, 10), (100, 7), (1939, 254), (5, 2)] {
            let starts = window_starts(n, width);
            assert_eq!(starts[0], 0);
            assert_eq!(*starts.last().unwrap() + width, n, "the last window ends at the end");
            assert!(starts.windows(2).all(|p| p[0] < p[1] && p[1] - p[0] <= width.div_ceil(2).max(1)));
        }
    }

    #[test]
    fn punctuation_tokens() {
        for t in [".", ",", "##!", "(", "$", "+", "…", "—", "«"] {
            assert!(is_punctuation(t), "{t}");
        }
        for t in ["a", "##s", "1", "[CLS]", "##", "é", "a."] {
            assert!(!is_punctuation(t), "{t}");
        }
    }
}
