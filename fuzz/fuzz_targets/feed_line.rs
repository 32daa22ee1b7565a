//! libFuzzer target: one line of a `cellar feed` file (issue 16.3).
#![no_main]

use cellar_fuzz as _; // its allocation cap
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cellar_stream::parsers::feed_line(data);
});
