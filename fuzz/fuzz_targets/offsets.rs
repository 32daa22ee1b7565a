//! libFuzzer target: an `offsets.bin` body and the records its entries point at (issue 16.3).
#![no_main]

use cellar_fuzz as _; // its allocation cap
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cellar_core::format::parsers::offsets(data);
});
