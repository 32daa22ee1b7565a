//! Generated hostile names (issue 16.5), shared by the tests that hold ids and names off the
//! file system (`#[path]`-included): one to four pieces of traversal, separators, NUL, dots,
//! percent-escapes, unicode look-alikes, bidirectional controls, newlines and very long runs,
//! the same on every run (a fixed linear congruential generator).

#![allow(dead_code)]

pub fn generated_names(count: usize, seed: u64) -> Vec<String> {
    let long = "x".repeat(70);
    let longer = "é".repeat(200);
    let pieces = [
        "..",
        ".",
        "/",
        "\\",
        "\0",
        "a",
        "Z9",
        "-",
        "_",
        "é",
        "ｅ",
        "%2e%2e",
        "~",
        " ",
        "\u{202e}",
        "\n",
        "/etc/passwd",
        "C:",
        "e\u{301}",
        "\u{fe0f}",
        long.as_str(),
        longer.as_str(),
    ];
    let mut state = seed;
    let mut next = |n: usize| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as usize % n
    };
    (0..count).map(|_| (0..1 + next(4)).map(|_| pieces[next(pieces.len())]).collect()).collect()
}
