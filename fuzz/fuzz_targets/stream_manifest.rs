//! libFuzzer target: `MANIFEST.json` or `stream.json`, as byte 0's parity picks (issue 16.3).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cellar_stream::parsers::manifest(cellar_fuzz::scratch(), data);
});
