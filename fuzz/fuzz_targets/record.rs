//! libFuzzer target: one vector record, byte 0 picking the bytes per vector (issue 16.3).
#![no_main]

use cellar_fuzz as _; // its allocation cap
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cellar_core::format::parsers::record(data);
});
