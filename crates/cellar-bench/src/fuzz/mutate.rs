//! Random changes to a seed file, of the kinds that break parsers: bits flipped, bytes set to
//! the integers length fields trip on (0, 1, MAX, just past a page, negative as unsigned),
//! arithmetic on a byte or a u32, cuts, insertions, deletions, a chunk copied elsewhere, two
//! seeds spliced, and for text formats JSON tokens that stress a decoder (huge numbers, deep
//! nesting, long strings, escapes, NUL).

use rand::rngs::StdRng;
use rand::Rng;

/// Inputs never grow past this (1 MiB): a parser's work stays proportional to a real file's.
pub const MAX_INPUT_BYTES: usize = 1 << 20;

const INTERESTING: [u64; 16] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xfff,
    0x1000,
    0x1001,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    0x7fff_ffff_ffff_ffff,
    u64::MAX,
];

const JSON_TOKENS: [&str; 18] = [
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "null",
    "-1",
    "0",
    "1e999",
    "-0.0",
    "18446744073709551616",
    "4294967296",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "NaN",
    "\t\n",
];

pub struct Mutator {
    pub rng: StdRng,
}

impl Mutator {
    /// One to four stacked changes to `seed`; `other` is a second seed for splicing; `text`
    /// adds the JSON-aware changes.
    pub fn mutate(&mut self, seed: &[u8], other: &[u8], text: bool) -> Vec<u8> {
        let mut out = seed.to_vec();
        for _ in 0..self.rng.gen_range(1..=4) {
            self.once(&mut out, other, text);
        }
        out.truncate(MAX_INPUT_BYTES);
        out
    }

    fn at(&mut self, bytes: &[u8]) -> usize {
        self.rng.gen_range(0..bytes.len().max(1))
    }

    fn once(&mut self, b: &mut Vec<u8>, other: &[u8], text: bool) {
        let kinds = if text { 12 } else { 10 };
        match self.rng.gen_range(0..kinds) {
            0 if !b.is_empty() => {
                let at = self.at(b);
                b[at] ^= 1 << self.rng.gen_range(0..8);
            }
            1 if !b.is_empty() => {
                let at = self.at(b);
                b[at] = self.rng.gen();
            }
            2 => {
                let width = [1, 2, 4, 8][self.rng.gen_range(0..4)];
                let mut value = INTERESTING[self.rng.gen_range(0..INTERESTING.len())];
                if self.rng.gen_bool(0.25) {
                    value = (b.len() as u64 + self.rng.gen_range(0..3)).wrapping_sub(1);
                }
                if b.len() >= width {
                    let at = self.rng.gen_range(0..=b.len() - width);
                    b[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
                }
            }
            3 if b.len() >= 4 => {
                let at = self.rng.gen_range(0..=b.len() - 4);
                let value = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
                let delta = self.rng.gen_range(1..=35u32);
                let value =
                    if self.rng.gen() { value.wrapping_add(delta) } else { value.wrapping_sub(delta) };
                b[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
            4 => {
                let at = self.at(b);
                b.truncate(at);
            }
            5 if !b.is_empty() => {
                let from = self.at(b);
                let to = (from + self.rng.gen_range(1..=64)).min(b.len());
                b.drain(from..to);
            }
            6 => {
                let at = self.rng.gen_range(0..=b.len());
                let n = self.rng.gen_range(1..=64);
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.gen()).collect();
                b.splice(at..at, bytes);
            }
            7 if !b.is_empty() => {
                let from = self.at(b);
                let to = (from + self.rng.gen_range(1..=256)).min(b.len());
                let chunk = b[from..to].to_vec();
                let at = self.rng.gen_range(0..=b.len());
                b.splice(at..at, chunk);
            }
            8 if !other.is_empty() => {
                let keep = self.rng.gen_range(0..=b.len());
                let from = self.rng.gen_range(0..other.len());
                b.truncate(keep);
                b.extend_from_slice(&other[from..]);
            }
            9 if !b.is_empty() => {
                let at = self.at(b);
                b[at] = [0, 0xff, b'\n', b'"', b'\\', 0x80][self.rng.gen_range(0..6)];
            }
            10 => {
                let token = JSON_TOKENS[self.rng.gen_range(0..JSON_TOKENS.len())];
                let at = self.rng.gen_range(0..=b.len());
                b.splice(at..at, token.bytes());
            }
            11 => {
                let depth = self.rng.gen_range(1..=600);
                let at = self.rng.gen_range(0..=b.len());
                let (open, long) = if self.rng.gen() { ("[", false) } else { ("\"", true) };
                let insert =
                    if long { format!("{open}{}\"", "a".repeat(depth * 64)) } else { open.repeat(depth) };
                b.splice(at..at, insert.into_bytes());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mutations_change_inputs_and_stay_bounded() {
        let mut m = Mutator { rng: StdRng::seed_from_u64(1) };
        let seed = vec![7u8; 4096];
        let mutated: Vec<Vec<u8>> = (0..500).map(|_| m.mutate(&seed, b"{\"a\":1}", true)).collect();
        assert!(mutated.iter().filter(|b| **b != seed).count() > 450, "nearly every input changes");
        assert!(mutated.iter().all(|b| b.len() <= MAX_INPUT_BYTES));
        assert!(mutated.iter().any(|b| b.len() < seed.len()) && mutated.iter().any(|b| b.len() > seed.len()));
    }
}
