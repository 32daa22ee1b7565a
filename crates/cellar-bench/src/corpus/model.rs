//! The generative model of the synthetic retrieval collection (issue 17.1): text and token
//! vectors that agree, so BM25 and MaxSim both mean something on it, at any size.
//!
//! - **Words.** `BACKGROUND_WORDS` function-like words used everywhere, then the content words.
//!   Words come in synonym groups of one to three; each group has a direction and each word's
//!   base vector is that direction plus its own spread, so synonyms share a direction (cosine
//!   about 0.7) and other words are near-orthogonal. A word's text is made of consonant-vowel
//!   syllables with vowels a, o, u only: no English stop word, and no suffix the English
//!   stemmer would strip, so BM25 sees every word as itself.
//! - **Topics.** Each topic has its own vocabulary of `topic_words` content words with a Zipfian
//!   frequency over it, and a direction (the context every token in it leans towards).
//! - **Documents.** A log-normal number of words (`mean_words`); a primary topic and sometimes a
//!   secondary one; a few focus words of its own (uniform over the content vocabulary, what
//!   makes a document findable among its topic's); background words between. Each occurrence's
//!   vector is its word's base vector, a pull towards the topic's direction and a noise of its
//!   own, both larger the more frequent the word (`CONTEXT`, `TOKEN_NOISE`): MaxSim behaves like
//!   soft term matching that weighs rare words most, as IDF does. A small fraction of documents are near
//!   duplicates of a recent one (a tenth of its words replaced).
//! - **Queries.** A target document (never a duplicate); a few of its words, mostly its focus
//!   words; each word replaced by a synonym with `P_SYNONYM` (what BM25 misses and vectors
//!   catch), sometimes a background word or a stray word of the topic. The qrels give the
//!   target grade 2 and its near duplicates grade 1.
//!
//! Document `i` and query `q` depend only on (seed, i) and (seed, q): any part can be made
//! again, in any order, on any thread.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, StandardNormal};

/// Function-like words (ids `0..BACKGROUND_WORDS`): frequent everywhere, Zipfian.
const BACKGROUND_WORDS: usize = 300;
/// Share of a document's words that are background words.
const P_BACKGROUND: f64 = 0.3;
/// Share of a document's words that are its focus words.
const P_FOCUS: f64 = 0.15;
/// Focus words per document (drawn uniformly from the content vocabulary).
const FOCUS_WORDS: std::ops::RangeInclusive<usize> = 3..=6;
/// Chance that a document has a secondary topic, and the share of its topic words from it.
const P_SECONDARY: f64 = 0.3;
/// Zipf exponents of a topic's vocabulary and of the background words.
const ZIPF_TOPIC: f64 = 1.0;
const ZIPF_BACKGROUND: f64 = 1.1;
/// Document length in words: log-normal with this sigma, clamped.
const LENGTH_SIGMA: f64 = 0.6;
const MIN_WORDS: usize = 8;
const MAX_WORDS: usize = 400;
/// Spread of a word's base vector around its synonym group's direction (per unit direction).
const SYNONYM_SPREAD: f32 = 0.6;
/// Pull of a token towards its topic's direction, and its own noise, from the rarest word to
/// the most frequent (linear in the word's frequency percentile): frequent words are the most
/// contextual, as measured of real contextual encoders (Ethayarajh 2019: stop words have the
/// lowest self-similarity across contexts), so two occurrences of a rare word match closely and
/// of a frequent word loosely. This is what gives MaxSim its implicit IDF.
const CONTEXT: (f32, f32) = (0.15, 0.5);
const TOKEN_NOISE: (f32, f32) = (0.12, 0.8);
/// Rows of the noise table; a token's noise is the sum of two rows picked at random.
const NOISE_ROWS: usize = 4096;
/// Near duplicates: the chance a document is one, how far back its source may be, the share
/// of the source's words it replaces.
const P_DUPLICATE: f64 = 0.02;
const DUPLICATE_WINDOW: u64 = 1000;
const P_REPLACE: f64 = 0.1;
/// Query length in words (log-normal around this mean, clamped), and its noise.
const QUERY_MEAN_WORDS: f64 = 5.0;
const QUERY_WORDS: std::ops::RangeInclusive<usize> = 2..=12;
const P_QUERY_FOCUS: f64 = 0.5;
const P_QUERY_BACKGROUND: f64 = 0.1;
const P_SYNONYM: f64 = 0.4;
const P_STRAY: f64 = 0.15;

/// Syllables of a word's text: 12 consonants by the vowels a, o, u.
const CONSONANTS: &[u8; 12] = b"bdfgkmnprtvz";
const VOWELS: &[u8; 3] = b"aou";
const SYLLABLES: usize = CONSONANTS.len() * VOWELS.len();

/// What a collection is made of; `Model::new` checks it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CorpusConfig {
    pub docs: u64,
    pub queries: usize,
    pub dim: usize,
    /// Content words (besides the background words).
    pub vocab: usize,
    pub topics: usize,
    /// Content words in each topic's vocabulary.
    pub topic_words: usize,
    /// Mean document length in words (one token vector per word).
    pub mean_words: f64,
    pub seed: u64,
}

/// One generated document: its words (ids into the vocabulary) and token vectors.
pub struct GenDoc {
    pub words: Vec<u32>,
    /// `words.len() * dim` values, unit rows.
    pub tokens: Vec<f32>,
    /// The normalised sum of the tokens.
    pub pooled: Vec<f32>,
}

/// One generated query, its vectors and its judgments (document index, grade).
pub struct GenQuery {
    pub words: Vec<u32>,
    pub tokens: Vec<f32>,
    pub pooled: Vec<f32>,
    pub relevant: Vec<(u64, u8)>,
}

/// The plan of a document before its vectors: words and the topic each occurrence leans to.
struct Plan {
    words: Vec<u32>,
    topics: Vec<u32>,
    focus: Vec<u32>,
    primary: u32,
}

pub struct Model {
    config: CorpusConfig,
    /// `(BACKGROUND_WORDS + vocab) * dim` base vectors.
    words: Vec<f32>,
    /// Each word's synonym group, and the groups' members.
    group_of: Vec<u32>,
    groups: Vec<std::ops::Range<u32>>,
    /// `topics * dim` directions and `topics * topic_words` vocabularies (word ids).
    topic_dirs: Vec<f32>,
    topic_vocab: Vec<u32>,
    topic_cdf: Vec<f64>,
    background_cdf: Vec<f64>,
    noise: Vec<f32>,
    /// Each word's frequency percentile among all words (1: the most frequent).
    commonness: Vec<f32>,
    lengths: LogNormal<f64>,
    query_lengths: LogNormal<f64>,
}

/// Streams of randomness that never meet: a document's, its duplicate draw, a query's.
const STREAM_DOC: u64 = 1;
const STREAM_DUPLICATE: u64 = 2;
const STREAM_QUERY: u64 = 3;

fn rng_for(seed: u64, stream: u64, n: u64) -> StdRng {
    // splitmix64 over the three, so neighbouring n give unrelated generators.
    let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    StdRng::seed_from_u64(z ^ (z >> 31))
}

fn gaussian(rng: &mut StdRng, out: &mut [f32]) {
    out.iter_mut().for_each(|x| *x = rng.sample::<f32, _>(StandardNormal));
}

fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// The normalised sum of `tokens` (rows of `dim`): a document's or a query's pooled vector.
fn pooled(tokens: &[f32], dim: usize) -> Vec<f32> {
    let mut sum = vec![0f32; dim];
    tokens.chunks_exact(dim).for_each(|row| sum.iter_mut().zip(row).for_each(|(p, x)| *p += x));
    normalize(&mut sum);
    sum
}

/// Cumulative Zipf weights of ranks 1..=n with exponent `s`, ending at 1.
fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|r| {
            acc += (r as f64).powf(-s);
            acc
        })
        .collect();
    cdf.iter_mut().for_each(|c| *c /= acc);
    cdf
}

fn draw(cdf: &[f64], rng: &mut StdRng) -> usize {
    let u: f64 = rng.gen();
    cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
}

/// Each word's expected share of a collection's words, turned into its percentile among all
/// words (0: the rarest, 1: the most frequent; ties share the lower rank).
fn commonness(
    config: &CorpusConfig,
    topic_vocab: &[u32],
    topic_cdf: &[f64],
    background_cdf: &[f64],
) -> Vec<f32> {
    let total = BACKGROUND_WORDS + config.vocab;
    let pmf = |cdf: &[f64], r: usize| cdf[r] - if r == 0 { 0.0 } else { cdf[r - 1] };
    let mut share = vec![P_FOCUS / config.vocab as f64; total];
    for (r, share) in share.iter_mut().enumerate().take(BACKGROUND_WORDS) {
        *share = P_BACKGROUND * pmf(background_cdf, r);
    }
    let topic_share = (1.0 - P_BACKGROUND - P_FOCUS) / config.topics as f64;
    for vocab in topic_vocab.chunks_exact(config.topic_words) {
        for (r, &w) in vocab.iter().enumerate() {
            share[w as usize] += topic_share * pmf(topic_cdf, r);
        }
    }
    let mut order: Vec<u32> = (0..total as u32).collect();
    order.sort_by(|&a, &b| share[a as usize].total_cmp(&share[b as usize]));
    let mut commonness = vec![0f32; total];
    let denominator = (total - 1).max(1) as f32;
    let mut rank = 0;
    for (i, &w) in order.iter().enumerate() {
        if i > 0 && share[w as usize] > share[order[i - 1] as usize] {
            rank = i;
        }
        commonness[w as usize] = rank as f32 / denominator;
    }
    commonness
}

/// The text of word `w`: consonant-vowel syllables, two for the first 36², three for the next
/// 36³, and so on, so every id has its own text.
pub fn word_text(w: u32) -> String {
    let (mut rest, mut syllables) = (w as u64, 2u32);
    while rest >= (SYLLABLES as u64).pow(syllables) {
        rest -= (SYLLABLES as u64).pow(syllables);
        syllables += 1;
    }
    let mut text = String::with_capacity(2 * syllables as usize);
    for _ in 0..syllables {
        let s = (rest % SYLLABLES as u64) as usize;
        rest /= SYLLABLES as u64;
        text.push(CONSONANTS[s / VOWELS.len()] as char);
        text.push(VOWELS[s % VOWELS.len()] as char);
    }
    text
}

/// Words joined by spaces.
pub fn words_text(words: &[u32]) -> String {
    words.iter().map(|&w| word_text(w)).collect::<Vec<_>>().join(" ")
}

impl Model {
    pub fn new(config: CorpusConfig) -> Result<Model, String> {
        if config.docs == 0 || config.dim == 0 || config.topics == 0 || config.mean_words < 1.0 {
            return Err(format!("a collection needs docs, dim, topics and mean words >= 1 (got {config:?})"));
        }
        if config.docs > u32::MAX as u64 {
            return Err(format!("at most {} documents (an index's ids are 32-bit)", u32::MAX));
        }
        if config.topic_words == 0 || config.topic_words > config.vocab {
            return Err(format!(
                "a topic's vocabulary ({}) must have 1 to vocab ({}) words",
                config.topic_words, config.vocab
            ));
        }
        let total_words = BACKGROUND_WORDS + config.vocab;
        if total_words > u32::MAX as usize / 2 {
            return Err(format!("a vocabulary of {} words is too large", config.vocab));
        }
        let dim = config.dim;
        let mut rng = rng_for(config.seed, 0, 0);
        // Synonym groups of 1-3 content words; background words stand alone.
        let (mut group_of, mut groups) = (Vec::with_capacity(total_words), Vec::new());
        let mut start = 0u32;
        while (start as usize) < total_words {
            let size = if (start as usize) < BACKGROUND_WORDS { 1 } else { rng.gen_range(1..=3u32) };
            let end = (start + size).min(total_words as u32);
            group_of.extend(std::iter::repeat_n(groups.len() as u32, (end - start) as usize));
            groups.push(start..end);
            start = end;
        }
        let mut words = vec![0f32; total_words * dim];
        let (mut direction, mut spread) = (vec![0f32; dim], vec![0f32; dim]);
        let scale = SYNONYM_SPREAD / (dim as f32).sqrt();
        for group in &groups {
            gaussian(&mut rng, &mut direction);
            normalize(&mut direction);
            for w in group.clone() {
                gaussian(&mut rng, &mut spread);
                let row = &mut words[w as usize * dim..(w as usize + 1) * dim];
                row.iter_mut().zip(&direction).zip(&spread).for_each(|((x, d), s)| *x = d + s * scale);
                normalize(row);
            }
        }
        let mut topic_dirs = vec![0f32; config.topics * dim];
        for row in topic_dirs.chunks_exact_mut(dim) {
            gaussian(&mut rng, row);
            normalize(row);
        }
        // Each topic's vocabulary: distinct content words in a random order (the order is the
        // Zipf rank).
        let mut topic_vocab = Vec::with_capacity(config.topics * config.topic_words);
        for _ in 0..config.topics {
            let picked = rand::seq::index::sample(&mut rng, config.vocab, config.topic_words);
            topic_vocab.extend(picked.iter().map(|w| (BACKGROUND_WORDS + w) as u32));
        }
        let mut noise = vec![0f32; NOISE_ROWS * dim];
        gaussian(&mut rng, &mut noise);
        let unit = 1.0 / (dim as f32).sqrt();
        noise.iter_mut().for_each(|x| *x *= unit);
        let topic_cdf = zipf_cdf(config.topic_words, ZIPF_TOPIC);
        let background_cdf = zipf_cdf(BACKGROUND_WORDS, ZIPF_BACKGROUND);
        let commonness = commonness(&config, &topic_vocab, &topic_cdf, &background_cdf);
        let mu = |mean: f64, sigma: f64| mean.ln() - sigma * sigma / 2.0;
        Ok(Model {
            lengths: LogNormal::new(mu(config.mean_words, LENGTH_SIGMA), LENGTH_SIGMA)
                .expect("valid log-normal"),
            query_lengths: LogNormal::new(mu(QUERY_MEAN_WORDS, 0.4), 0.4).expect("valid log-normal"),
            topic_cdf,
            background_cdf,
            commonness,
            config,
            words,
            group_of,
            groups,
            topic_dirs,
            topic_vocab,
            noise,
        })
    }

    pub fn config(&self) -> &CorpusConfig {
        &self.config
    }

    /// The document that document `i` is a near duplicate of, if it is one.
    pub fn duplicate_of(&self, i: u64) -> Option<u64> {
        let candidate = |i: u64| -> Option<u64> {
            let mut rng = rng_for(self.config.seed, STREAM_DUPLICATE, i);
            (i > 0 && rng.gen_bool(P_DUPLICATE)).then(|| i - 1 - rng.gen_range(0..i.min(DUPLICATE_WINDOW)))
        };
        // A duplicate's source is never a duplicate itself: no chains.
        candidate(i).filter(|&j| candidate(j).is_none())
    }

    fn topic_word(&self, topic: u32, rng: &mut StdRng) -> u32 {
        self.topic_vocab[topic as usize * self.config.topic_words + draw(&self.topic_cdf, rng)]
    }

    fn background_word(&self, rng: &mut StdRng) -> u32 {
        draw(&self.background_cdf, rng) as u32
    }

    fn synonym(&self, w: u32, rng: &mut StdRng) -> u32 {
        let group = self.groups[self.group_of[w as usize] as usize].clone();
        let others: Vec<u32> = group.filter(|&o| o != w).collect();
        if others.is_empty() {
            w
        } else {
            others[rng.gen_range(0..others.len())]
        }
    }

    fn original_plan(&self, i: u64) -> Plan {
        let c = &self.config;
        let mut rng = rng_for(c.seed, STREAM_DOC, i);
        let len = (self.lengths.sample(&mut rng).round() as usize).clamp(MIN_WORDS, MAX_WORDS);
        let primary = rng.gen_range(0..c.topics as u32);
        let secondary =
            (c.topics > 1 && rng.gen_bool(P_SECONDARY)).then(|| rng.gen_range(0..c.topics as u32));
        let focus: Vec<u32> = (0..rng.gen_range(FOCUS_WORDS))
            .map(|_| (BACKGROUND_WORDS + rng.gen_range(0..c.vocab)) as u32)
            .collect();
        let (mut words, mut topics) = (Vec::with_capacity(len), Vec::with_capacity(len));
        for _ in 0..len {
            let topic = match secondary {
                Some(s) if rng.gen_bool(P_SECONDARY) => s,
                _ => primary,
            };
            let u: f64 = rng.gen();
            words.push(if u < P_BACKGROUND {
                self.background_word(&mut rng)
            } else if u < P_BACKGROUND + P_FOCUS {
                focus[rng.gen_range(0..focus.len())]
            } else {
                self.topic_word(topic, &mut rng)
            });
            topics.push(topic);
        }
        Plan { words, topics, focus, primary }
    }

    fn plan(&self, i: u64) -> Plan {
        let Some(source) = self.duplicate_of(i) else {
            return self.original_plan(i);
        };
        let mut plan = self.original_plan(source);
        let mut rng = rng_for(self.config.seed, STREAM_DOC, i);
        for (w, &topic) in plan.words.iter_mut().zip(&plan.topics) {
            if rng.gen_bool(P_REPLACE) {
                *w = if rng.gen_bool(0.5) {
                    self.synonym(*w, &mut rng)
                } else {
                    self.topic_word(topic, &mut rng)
                };
            }
        }
        plan
    }

    /// One token vector: the word's base vector, its topic's pull, and its own noise.
    fn token(&self, word: u32, topic: u32, rng: &mut StdRng, out: &mut [f32]) {
        let dim = self.config.dim;
        let base = &self.words[word as usize * dim..(word as usize + 1) * dim];
        let dir = &self.topic_dirs[topic as usize * dim..(topic as usize + 1) * dim];
        let a = rng.gen_range(0..NOISE_ROWS) * dim;
        let b = rng.gen_range(0..NOISE_ROWS) * dim;
        let (na, nb) = (&self.noise[a..a + dim], &self.noise[b..b + dim]);
        let common = self.commonness[word as usize];
        let lerp = |(rare, frequent): (f32, f32)| rare + (frequent - rare) * common;
        let (context, noise) = (lerp(CONTEXT), lerp(TOKEN_NOISE));
        for d in 0..dim {
            out[d] = base[d] + context * dir[d] + noise * (na[d] + nb[d]);
        }
        normalize(out);
    }

    fn vectors(&self, words: &[u32], topics: &[u32], rng: &mut StdRng) -> Vec<f32> {
        let dim = self.config.dim;
        let mut tokens = vec![0f32; words.len() * dim];
        for ((row, &w), &t) in tokens.chunks_exact_mut(dim).zip(words).zip(topics) {
            self.token(w, t, rng, row);
        }
        tokens
    }

    /// Document `i` (`i < docs`).
    pub fn doc(&self, i: u64) -> GenDoc {
        let plan = self.plan(i);
        // Occurrence noise from a stream of its own, so a duplicate's vectors are fresh.
        let mut rng = rng_for(self.config.seed ^ 0x5EED, STREAM_DOC, i);
        let tokens = self.vectors(&plan.words, &plan.topics, &mut rng);
        let pooled = pooled(&tokens, self.config.dim);
        GenDoc { words: plan.words, tokens, pooled }
    }

    /// Query `q`: its target, words, vectors and judgments.
    pub fn query(&self, q: u64) -> GenQuery {
        let c = &self.config;
        let mut rng = rng_for(c.seed, STREAM_QUERY, q);
        let target = loop {
            let t = rng.gen_range(0..c.docs);
            if self.duplicate_of(t).is_none() {
                break t;
            }
        };
        let plan = self.plan(target);
        let content: Vec<u32> =
            plan.words.iter().copied().filter(|&w| w as usize >= BACKGROUND_WORDS).collect();
        let len = (self.query_lengths.sample(&mut rng).round() as usize)
            .clamp(*QUERY_WORDS.start(), *QUERY_WORDS.end());
        let mut words = Vec::with_capacity(len);
        for _ in 0..len {
            let u: f64 = rng.gen();
            let mut w = if u < P_QUERY_BACKGROUND || content.is_empty() {
                self.background_word(&mut rng)
            } else if u < P_QUERY_BACKGROUND + P_STRAY {
                self.topic_word(plan.primary, &mut rng)
            } else if rng.gen_bool(P_QUERY_FOCUS) {
                plan.focus[rng.gen_range(0..plan.focus.len())]
            } else {
                content[rng.gen_range(0..content.len())]
            };
            if rng.gen_bool(P_SYNONYM) {
                w = self.synonym(w, &mut rng);
            }
            words.push(w);
        }
        let topics = vec![plan.primary; words.len()];
        let tokens = self.vectors(&words, &topics, &mut rng);
        let dim = c.dim;
        let pooled = pooled(&tokens, dim);
        let mut relevant = vec![(target, 2)];
        let last = (target + DUPLICATE_WINDOW).min(c.docs - 1);
        relevant
            .extend((target + 1..=last).filter(|&i| self.duplicate_of(i) == Some(target)).map(|i| (i, 1)));
        GenQuery { words, tokens, pooled, relevant }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Model {
        Model::new(CorpusConfig {
            docs: 3000,
            queries: 50,
            dim: 32,
            vocab: 2000,
            topics: 10,
            topic_words: 200,
            mean_words: 40.0,
            seed: 7,
        })
        .unwrap()
    }

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn word_texts_are_distinct_and_made_of_syllables() {
        let texts: std::collections::HashSet<String> = (0..60_000).map(word_text).collect();
        assert_eq!(texts.len(), 60_000);
        assert_eq!(word_text(0), "baba");
        assert_eq!(word_text(1296).len(), 6, "the first three-syllable word");
        assert!(texts.iter().all(|t| t.bytes().all(|b| CONSONANTS.contains(&b) || VOWELS.contains(&b))));
    }

    #[test]
    fn documents_and_queries_are_reproducible_in_any_order() {
        let (a, b) = (small(), small());
        for i in [2999, 0, 17, 1234] {
            let (x, y) = (a.doc(i), b.doc(i));
            assert_eq!(x.words, y.words);
            assert_eq!(x.tokens, y.tokens);
        }
        assert_eq!(a.query(5).words, b.query(5).words);
        assert_ne!(a.doc(1).words, a.doc(2).words);
    }

    #[test]
    fn token_vectors_follow_their_words() {
        let m = small();
        let doc = m.doc(10);
        let dim = m.config.dim;
        assert_eq!(doc.tokens.len(), doc.words.len() * dim);
        for row in doc.tokens.chunks_exact(dim) {
            assert!((dot(row, row) - 1.0).abs() < 1e-4);
        }
        // Two occurrences of one word are close (most shared words are frequent, the loosest);
        // occurrences of unrelated words are not.
        let other = m.doc(11);
        let (mut same, mut unrelated) = (Vec::new(), Vec::new());
        for (i, &w) in doc.words.iter().enumerate() {
            for (j, &v) in other.words.iter().enumerate() {
                let s = dot(&doc.tokens[i * dim..(i + 1) * dim], &other.tokens[j * dim..(j + 1) * dim]);
                if w == v {
                    same.push(s);
                } else if m.group_of[w as usize] != m.group_of[v as usize] {
                    unrelated.push(s);
                }
            }
        }
        let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
        assert!(!same.is_empty() && !unrelated.is_empty());
        assert!(
            mean(&same) > 0.35 && mean(&unrelated) < 0.15,
            "same {} unrelated {}",
            mean(&same),
            mean(&unrelated)
        );
        // Synonyms share a direction.
        let group = m.groups.iter().find(|g| g.len() == 2).unwrap().clone();
        let base = |w: u32| &m.words[w as usize * dim..(w as usize + 1) * dim];
        assert!(dot(base(group.start), base(group.start + 1)) > 0.4);
    }

    #[test]
    fn rare_words_match_themselves_closer_than_frequent_ones() {
        let m = small();
        let dim = m.config.dim;
        let mut rng = rng_for(1, 9, 9);
        let self_similarity = |w: u32, rng: &mut StdRng| {
            let (mut a, mut b) = (vec![0f32; dim], vec![0f32; dim]);
            (0..200)
                .map(|_| {
                    m.token(w, 0, rng, &mut a);
                    m.token(w, 1, rng, &mut b);
                    dot(&a, &b)
                })
                .sum::<f32>()
                / 200.0
        };
        let by_commonness = |pick: fn(f32) -> bool| {
            (0..m.commonness.len() as u32).find(|&w| pick(m.commonness[w as usize])).unwrap()
        };
        let (rare, frequent) = (by_commonness(|c| c < 0.05), by_commonness(|c| c > 0.99));
        let (r, f) = (self_similarity(rare, &mut rng), self_similarity(frequent, &mut rng));
        assert!(r > 0.85 && f < 0.6 && f > 0.2, "rare {r}, frequent {f}");
        // The most frequent words are the background words.
        assert!(m.commonness[0] > 0.99 && m.commonness[BACKGROUND_WORDS] < 0.99);
    }

    #[test]
    fn queries_come_from_their_target_and_judge_its_duplicates() {
        let m = small();
        let (mut matched, mut total) = (0, 0);
        for q in 0..50 {
            let query = m.query(q);
            let (target, grade) = query.relevant[0];
            assert_eq!(grade, 2);
            assert!(m.duplicate_of(target).is_none());
            let doc = m.doc(target);
            for w in &query.words {
                total += 1;
                matched += doc.words.contains(w) as usize;
            }
            for &(d, grade) in &query.relevant[1..] {
                assert_eq!((m.duplicate_of(d), grade), (Some(target), 1));
            }
            assert_eq!(query.tokens.len(), query.words.len() * m.config.dim);
        }
        // Most query words are the target's own; synonyms and strays are the rest.
        let share = matched as f64 / total as f64;
        assert!((0.4..0.9).contains(&share), "{share}");
        let dups = (0..3000).filter(|&i| m.duplicate_of(i).is_some()).count();
        assert!((20..120).contains(&dups), "{dups} near duplicates of 3000");
    }
}
