//! libFuzzer target: the 64-byte file header, decoded as each kind (issue 16.3).
#![no_main]

use cellar_core::format::parsers as core;
use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fuzz_target!(|data: &[u8]| {
    let _ = core::file_header(data);
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    cellar_fuzz::mutate_then_fix(data, size, max_size, seed, |b| core::fixup::header_led(b))
});
