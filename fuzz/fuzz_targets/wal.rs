//! libFuzzer target: a write-ahead log's framing, checksums and torn tails, every payload
//! accepted (its owners' decoders are the `stream-log` target and cellar-search's; issue 16.3).
#![no_main]

use cellar_core::format::parsers as core;
use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fuzz_target!(|data: &[u8]| {
    let _ = core::wal(cellar_fuzz::scratch(), data, |_| Ok(()));
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    cellar_fuzz::mutate_then_fix(data, size, max_size, seed, core::fixup::wal_records)
});
