//! libFuzzer target: a collection's log, each record split into entries (issue 16.3).
#![no_main]

use cellar_core::format::parsers::fixup;
use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fuzz_target!(|data: &[u8]| {
    let _ = cellar_stream::parsers::log(cellar_fuzz::scratch(), data);
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    cellar_fuzz::mutate_then_fix(data, size, max_size, seed, fixup::wal_records)
});
