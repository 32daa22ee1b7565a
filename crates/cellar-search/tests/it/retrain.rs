//! Re-training the IVF of a living index (`Index::retrain_ivf`): documents written from another
//! part of the space drift past the threshold; a retrain takes them in (nothing lost, nothing
//! twice, deletes kept), brings the drift back, helps a narrow probe find them, survives a
//! reopen, and documents written after it join the new clusters.

use std::collections::HashSet;

use cellar_core::codec::CodecKind;
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::live::retrain::RETRAIN_MIN_WRITTEN;
use cellar_search::{
    BuildOptions, DocIn, EmbeddedDoc, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp,
    WriteRequest,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tempfile::TempDir;

const DIM: usize = 16;

/// A unit vector near axis `axis`.
fn near(rng: &mut StdRng, axis: usize) -> Vec<f32> {
    let mut row: Vec<f32> = (0..DIM).map(|_| rng.gen_range(-0.25..0.25)).collect();
    row[axis] += 1.0;
    let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
    row.iter().map(|v| v / norm).collect()
}

fn written(id: &str, rows: Vec<Vec<f32>>) -> WriteOp {
    WriteOp::Add(DocIn {
        id: id.into(),
        text: format!("written {id}"),
        vectors: Some(QueryVectorsIn { tokens: rows, ..Default::default() }),
        ..DocIn::default()
    })
}

fn dense(index: &Index, query: &[f32], nprobe: usize) -> Vec<String> {
    let request = SearchRequest {
        k: Some(10),
        mode: Some(Mode::Dense),
        nprobe: Some(nprobe),
        include_text: Some(false),
        query_vectors: Some(QueryVectorsIn {
            tokens: vec![query.to_vec()],
            pooled: Some(query.to_vec()),
            ..Default::default()
        }),
        ..Default::default()
    };
    index.search(request).unwrap().hits.into_iter().map(|h| h.id).collect()
}

fn clusters(index: &Index) -> usize {
    index.ivf_config().unwrap().clusters
}

#[test]
fn a_retrain_takes_the_written_documents_in_and_brings_the_drift_back() {
    let mut rng = StdRng::seed_from_u64(11);
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    // The build's documents live near the first half of the axes ...
    let base: Vec<EmbeddedDoc> = (0..256)
        .map(|i| EmbeddedDoc {
            id: format!("b{i}"),
            text: format!("base {i}"),
            tokens: near(&mut rng, i % 8),
            ..EmbeddedDoc::default()
        })
        .collect();
    let mut options = BuildOptions::new("", &dir);
    options.codec = CodecKind::F16;
    options.ivf = Some(IvfBuildOptions { cluster_size: 16, ..IvfBuildOptions::default() });
    Index::build_from_embeddings(&options, DIM, None, base.into_iter().map(Ok)).unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert!(!index.needs_retrain(), "nothing written");

    // ... the written ones near the other half.
    let n = RETRAIN_MIN_WRITTEN as usize + 44;
    let ops: Vec<WriteOp> =
        (0..n).map(|i| written(&format!("w{i}"), vec![near(&mut rng, 8 + i % 8)])).collect();
    index.write(WriteRequest { ops }).unwrap();
    index
        .write(WriteRequest { ops: vec![WriteOp::Delete("w3".into()), WriteOp::Delete("b5".into())] })
        .unwrap();
    let drift = index.live_stats().ivf_drift.unwrap();
    assert!(drift > 1.5, "documents from elsewhere drift: {drift}");
    assert!(index.needs_retrain());

    let queries: Vec<Vec<f32>> = (0..16).map(|a| near(&mut rng, a)).collect();
    let all = clusters(&index);
    let exhaustive: Vec<Vec<String>> = queries.iter().map(|q| dense(&index, q, all)).collect();
    let narrow_before: Vec<Vec<String>> = queries.iter().map(|q| dense(&index, q, 2)).collect();
    let (old_clusters, old_docs) = (all, index.len());

    let config = index.retrain_ivf().unwrap();
    assert_eq!(config.docs as usize, old_docs, "every alive document is a member, once");
    assert_eq!(config.covers, Some(256 + n as u32));
    assert!(config.clusters > old_clusters, "{} clusters for {} documents", config.clusters, config.docs);
    assert_eq!(index.live_stats().ivf_drift, None, "nothing written since the retrain");
    assert!(!index.needs_retrain());
    let all = clusters(&index);
    for (q, want) in queries.iter().zip(&exhaustive) {
        let got = dense(&index, q, all);
        assert_eq!(got.iter().collect::<HashSet<_>>().len(), got.len(), "a document twice: {got:?}");
        assert_eq!(&got, want, "probing every cluster finds what it found before");
        assert!(!got.contains(&"w3".to_string()) && !got.contains(&"b5".to_string()), "deletes kept");
    }
    let recall = |lists: &[Vec<String>]| -> f64 {
        let found: usize =
            lists.iter().zip(&exhaustive).map(|(l, e)| l.iter().filter(|id| e.contains(id)).count()).sum();
        found as f64 / exhaustive.iter().map(Vec::len).sum::<usize>() as f64
    };
    let narrow_after: Vec<Vec<String>> = queries.iter().map(|q| dense(&index, q, 2)).collect();
    let (before, after) = (recall(&narrow_before), recall(&narrow_after));
    assert!(after > before, "a narrow probe finds more once the clusters fit: {before:.3} -> {after:.3}");

    // Written after the retrain: assigned to the new clusters, found, and no drift alarm.
    let later: Vec<WriteOp> =
        (0..40).map(|i| written(&format!("x{i}"), vec![near(&mut rng, i % 16)])).collect();
    index.write(WriteRequest { ops: later }).unwrap();
    let drift = index.live_stats().ivf_drift.unwrap();
    assert!(drift < 1.5, "documents like the retrained IVF's: {drift}");
    let x7 = index.get("x7").unwrap().unwrap();
    assert_eq!(x7.id, "x7");
    let all = clusters(&index);
    let now: Vec<Vec<String>> = queries.iter().map(|q| dense(&index, q, all)).collect();
    assert!(now.iter().flatten().any(|id| id.starts_with('x')), "later documents are found");
    assert!(now.iter().all(|l| l.iter().collect::<HashSet<_>>().len() == l.len()));

    drop(index);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(index.ivf_config().unwrap().covers, Some(256 + n as u32));
    let reopened: Vec<Vec<String>> = queries.iter().map(|q| dense(&index, q, all)).collect();
    assert_eq!(reopened, now, "the retrained IVF and the later documents' assignment survive a reopen");
    assert!(
        !tmp.path().join("index").join(cellar_search::live::retrain::RETRAIN_DIR).exists(),
        "no scratch left"
    );
}

#[test]
fn what_a_crash_leaves_of_a_retrain_is_recovered_or_removed() {
    let mut rng = StdRng::seed_from_u64(5);
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    let base = (0..64).map(|i| {
        Ok(EmbeddedDoc { id: format!("b{i}"), tokens: near(&mut rng, i % 16), ..EmbeddedDoc::default() })
    });
    let mut options = BuildOptions::new("", &dir);
    options.codec = CodecKind::F16;
    options.ivf = Some(IvfBuildOptions { cluster_size: 16, ..IvfBuildOptions::default() });
    Index::build_from_embeddings(&options, DIM, None, base).unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    index.write(WriteRequest { ops: vec![written("w0", vec![near(&mut rng, 3)])] }).unwrap();
    let config = index.retrain_ivf().unwrap();
    drop(index);
    // A crash between the swap's two renames: ivf/ aside, the new one not in place.
    std::fs::rename(dir.join("ivf"), dir.join("ivf.cellar-old")).unwrap();
    // ... and a retrain cut short before: its scratch rows and half-built IVF.
    for leftover in [cellar_search::live::retrain::RETRAIN_DIR, "ivf.cellar-building"] {
        std::fs::create_dir_all(dir.join(leftover)).unwrap();
        std::fs::write(dir.join(leftover).join("pooled.bin"), b"half").unwrap();
    }
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(index.ivf_config(), Some(config), "the IVF is put back, never lost");
    for leftover in [cellar_search::live::retrain::RETRAIN_DIR, "ivf.cellar-building", "ivf.cellar-old"] {
        assert!(!dir.join(leftover).exists(), "{leftover} is removed by the writer");
    }
    assert_eq!(dense(&index, &near(&mut rng, 3), clusters(&index)).len(), 10);
}
