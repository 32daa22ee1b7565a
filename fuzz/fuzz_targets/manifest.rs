//! libFuzzer target: an index's `manifest.json` (issue 16.3).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cellar_core::format::parsers::manifest(cellar_fuzz::scratch(), data);
});
