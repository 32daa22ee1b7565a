//! libFuzzer target: a streaming segment, its directory and every group's entries (issue 16.3).
#![no_main]

use cellar_stream::parsers as stream;
use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fuzz_target!(|data: &[u8]| {
    let _ = stream::segment(cellar_fuzz::scratch(), data);
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    cellar_fuzz::mutate_then_fix(data, size, max_size, seed, |b| stream::fixup_segment(b))
});
