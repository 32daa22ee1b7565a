//! The IVF first stage on the fixture index: exactness at full probe, the prefetcher's
//! invariance, bad input, a foreign dimension, damaged files, rebuilds.

use cellar_core::io::ReaderKind;
use cellar_core::CellarError;
use cellar_search::ivf::{build_ivf, IvfConfig};
use cellar_search::{Index, Mode, OpenOptions, SearchRequest};

use crate::fixture::{copy_index, ivf_options, open};

const QUERIES: [&str; 4] = [
    "how is espresso made from roasted beans",
    "lava and magma in an eruption",
    "ice carving valleys",
    "bread",
];

fn options(k: usize, mode: Mode) -> SearchRequest {
    SearchRequest { k: Some(k), mode: Some(mode), ..Default::default() }
}

fn ranking(index: &Index, query: &str, options: &SearchRequest) -> Vec<(String, f32)> {
    index
        .search(crate::fixture::ask(query, options))
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.id, h.score))
        .collect()
}

fn clusters(index: &Index) -> usize {
    index.ivf_config().expect("the fixture has an IVF").clusters
}

#[test]
fn the_build_clusters_every_document_once() {
    let index = open(ReaderKind::Mmap);
    let config = index.ivf_config().unwrap();
    assert_eq!(config.docs, 30);
    assert!((3..=6).contains(&config.clusters), "{} clusters of ~8 for 30 documents", config.clusters);
    assert!(config.build.smallest_cluster >= 1 && config.build.largest_cluster <= 30);
    assert!(config.search.nprobe >= 1 && config.search.nprobe <= config.clusters);
}

#[test]
fn full_probe_with_rescoring_equals_the_exact_scan_on_every_reader() {
    for reader in ReaderKind::ALL {
        let index = open(reader);
        for query in QUERIES {
            let exact = ranking(&index, query, &options(10, Mode::DenseExact));
            let mut ivf = options(10, Mode::Ivf);
            ivf.nprobe = Some(clusters(&index));
            ivf.oversample = Some(100.0);
            assert_eq!(ranking(&index, query, &ivf), exact, "{reader:?} {query}");
        }
    }
}

#[test]
fn codes_alone_rank_close_to_exact_and_report_their_work() {
    let index = open(ReaderKind::Direct);
    let mut found = 0;
    for query in QUERIES {
        let exact: Vec<String> =
            ranking(&index, query, &options(5, Mode::DenseExact)).into_iter().map(|h| h.0).collect();
        let mut request = options(5, Mode::Ivf);
        request.nprobe = Some(clusters(&index));
        request.rescore = Some(false);
        let response = index.search(crate::fixture::ask(query, &request)).unwrap();
        let stats = response.ivf.expect("ivf stats");
        assert_eq!((stats.clusters, stats.codes, stats.rescored), (clusters(&index), 30, 0));
        // A small IVF's posting blocks are held in RAM, even under the direct reader: their
        // bytes are counted, with no read call.
        assert!(stats.bytes_read > 0 && stats.read_calls == 0);
        found += response.hits.iter().filter(|h| exact.contains(&h.id)).count();
    }
    assert!(found >= 16, "1-bit codes found {found} of the exact top-5s' 20 documents");
}

#[test]
fn small_posting_files_are_held_in_ram_under_every_reader() {
    for kind in [ReaderKind::Mmap, ReaderKind::Direct, ReaderKind::Ram] {
        let index = open(kind);
        let ivf = index.ivf().unwrap();
        assert_eq!(ivf.postings_reader(), ReaderKind::Ram, "{kind:?}");
        assert!(
            ivf.ram_bytes() as u64
                > std::fs::metadata(index.dir().join("ivf/ivf_postings.bin")).unwrap().len()
        );
    }
}

#[test]
fn prefetching_never_changes_the_ranking() {
    let index = open(ReaderKind::Direct);
    for mode in [Mode::Dense, Mode::Hybrid] {
        for query in QUERIES {
            let mut plain = options(10, mode);
            plain.hybrid_candidates = Some(10);
            plain.rerank_k = Some(8);
            plain.prefetch = Some(false);
            let expected = ranking(&index, query, &plain);
            assert!(index.search(crate::fixture::ask(query, &plain)).unwrap().prefetch.is_none());
            for step in [0.05, 0.3, 1.0] {
                let mut request = plain.clone();
                request.prefetch = Some(true);
                request.prefetch_step = Some(step);
                let response = index.search(crate::fixture::ask(query, &request)).unwrap();
                let got: Vec<(String, f32)> = response.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
                assert_eq!(got, expected, "{mode} {query} step {step}");
                let p = response.prefetch.expect("prefetch stats");
                assert_eq!(p.needed, 8.min(response.candidates));
                assert!(p.hits <= p.needed && p.hits <= p.prefetched && (0.0..=1.0).contains(&p.hit_rate));
                // The records BM25 put first were read while the query was encoded.
                assert_eq!(p.misses_read, p.needed - p.hits - p.early_read);
                assert!(mode == Mode::Hybrid || p.early_read == 0, "{mode}: {p:?}");
            }
        }
    }
}

#[test]
fn prefetch_after_the_whole_probe_hits_everything_without_rescoring() {
    let index = open(ReaderKind::Mmap);
    let mut request = options(10, Mode::Dense);
    request.rescore = Some(false);
    request.prefetch = Some(true);
    request.prefetch_step = Some(1.0);
    request.rerank_k = Some(6);
    let p = index.search(crate::fixture::ask(QUERIES[0], &request)).unwrap().prefetch.unwrap();
    assert_eq!((p.hits, p.needed, p.misses_read, p.hit_rate), (6, 6, 0, 1.0));
}

#[test]
fn hybrid_without_ivf_candidates_is_the_bm25_hybrid() {
    let index = open(ReaderKind::Mmap);
    let (_tmp, stripped) = copy_index();
    std::fs::remove_dir_all(IvfConfig::dir(&stripped)).unwrap();
    let plain = Index::open(&stripped, OpenOptions::default()).unwrap();
    let mut request = options(10, Mode::Hybrid);
    request.hybrid_candidates = Some(0);
    for query in QUERIES {
        assert_eq!(ranking(&index, query, &request), ranking(&plain, query, &options(10, Mode::Hybrid)));
    }
}

/// Issue 21.4: a query BM25 matches nothing of (misspelt, stop words only) used to fuse
/// inf - inf: `null` scores over HTTP, NaN in the CLI, hits in internal-id order.
#[test]
fn hybrid_with_nothing_for_bm25_ranks_by_the_ivf_with_finite_sorted_scores() {
    let index = open(ReaderKind::Mmap);
    for query in ["zzzqqqxx", "a", "the of and"] {
        let response = index.search(crate::fixture::ask(query, &options(5, Mode::Hybrid))).unwrap();
        assert!(!response.hits.is_empty(), "{query}: the IVF's candidates are still there");
        let scores: Vec<f32> = response.hits.iter().map(|h| h.score).collect();
        assert!(scores.iter().all(|s| s.is_finite()), "{query}: {scores:?}");
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{query}: not sorted: {scores:?}");
    }
}

fn invalid(result: cellar_core::Result<cellar_search::SearchResponse>, needle: &str) {
    match result {
        Err(CellarError::InvalidInput(message)) => assert!(message.contains(needle), "{message}"),
        Err(other) => panic!("expected InvalidInput about {needle}, got {other:?}"),
        Ok(_) => panic!("expected InvalidInput about {needle}, got hits"),
    }
}

#[test]
fn bad_ivf_parameters_are_refused_and_the_index_keeps_answering() {
    let index = open(ReaderKind::Mmap);
    let n = clusters(&index);
    let with = |f: &dyn Fn(&mut SearchRequest)| {
        let mut request = options(5, Mode::Dense);
        f(&mut request);
        index.search(crate::fixture::ask("bread", &request))
    };
    invalid(with(&|r| r.nprobe = Some(0)), "nprobe");
    invalid(with(&|r| r.nprobe = Some(n + 1)), &format!("{n} clusters"));
    invalid(with(&|r| r.prefetch_step = Some(0.0)), "prefetch_step");
    invalid(with(&|r| r.prefetch_step = Some(1.5)), "prefetch_step");
    invalid(with(&|r| r.prefetch_step = Some(f32::NAN)), "prefetch_step");
    invalid(with(&|r| r.oversample = Some(0.5)), "oversample");
    invalid(with(&|r| r.hybrid_candidates = Some(1_000_000)), "hybrid_candidates");
    assert_eq!(with(&|_| {}).unwrap().hits.len(), 5);
}

#[test]
fn ivf_modes_on_an_index_without_one_say_how_to_build_it() {
    let (_tmp, stripped) = copy_index();
    std::fs::remove_dir_all(IvfConfig::dir(&stripped)).unwrap();
    let index = Index::open(&stripped, OpenOptions::default()).unwrap();
    invalid(index.search(crate::fixture::ask("bread", &options(5, Mode::Dense))), "cellar ivf build");
    invalid(index.search(crate::fixture::ask("bread", &options(5, Mode::Ivf))), "cellar ivf build");
    let mut joined = options(5, Mode::Hybrid);
    joined.hybrid_candidates = Some(5);
    invalid(index.search(crate::fixture::ask("bread", &joined)), "cellar ivf build");
    assert_eq!(index.search(crate::fixture::ask("bread", &options(5, Mode::Hybrid))).unwrap().hits.len(), 5);
}

#[test]
fn an_ivf_of_another_dimension_is_refused_at_open() {
    let (_tmp, copy) = copy_index();
    let path = IvfConfig::dir(&copy).join("ivf.json");
    let json = std::fs::read_to_string(&path).unwrap().replace("\"dim\": 384", "\"dim\": 128");
    std::fs::write(&path, json).unwrap();
    let error = Index::open(&copy, OpenOptions::default()).err().expect("refused");
    assert!(matches!(error, CellarError::WrongDimension { expected: 384, .. }), "{error:?}");
}

/// Flips one byte at `offset` past the header of `file` in the copy's `ivf/`.
fn flip(index_dir: &std::path::Path, file: &str, offset: u64) {
    use std::os::unix::fs::FileExt;
    let path = IvfConfig::dir(index_dir).join(file);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, 4096 + offset).unwrap();
    f.write_all_at(&[byte[0] ^ 0x10], 4096 + offset).unwrap();
}

#[test]
fn damaged_blocks_and_vectors_are_reported_not_searched() {
    for (file, expect) in [("ivf_postings.bin", "posting block"), ("ivf_vectors.bin", "fails its checksum")] {
        let (_tmp, copy) = copy_index();
        flip(&copy, file, 3);
        let index =
            Index::open(&copy, OpenOptions { reader: ReaderKind::Direct, ..Default::default() }).unwrap();
        let mut request = options(30, Mode::Ivf);
        request.nprobe = Some(clusters(&index));
        match index.search(crate::fixture::ask("bread", &request)) {
            Err(CellarError::Corrupted { detail, .. }) => assert!(detail.contains(expect), "{detail}"),
            other => panic!("{file}: expected Corrupted, got {:?}", other.map(|r| r.hits.len())),
        }
    }
}

#[test]
fn a_rebuild_replaces_the_ivf_and_clears_an_interrupted_one() {
    let (_tmp, copy) = copy_index();
    let leftover = copy.join("ivf.cellar-building");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::write(leftover.join("ivf_postings.bin"), b"half written").unwrap();
    // The index is closed before its IVF is rebuilt: a build is refused while it is open.
    let n = clusters(&Index::open(&copy, OpenOptions::default()).unwrap());
    let mut options_big = ivf_options();
    options_big.cluster_size = 16;
    let config = build_ivf(&copy, &options_big).unwrap();
    assert!(config.clusters < n, "bigger clusters, fewer of them: {} vs {n}", config.clusters);
    assert!(!leftover.exists());
    let after = Index::open(&copy, OpenOptions::default()).unwrap();
    assert_eq!(clusters(&after), config.clusters);
    assert_eq!(after.search(crate::fixture::ask("bread", &options(3, Mode::Dense))).unwrap().hits.len(), 3);
}

#[test]
fn hybrid_with_ivf_candidates_and_token_vectors_only_probes_with_their_normalised_mean() {
    let index = open(ReaderKind::Mmap);
    let encoded = index.encoder().unwrap().encode_query("bread").unwrap();
    let dim = index.config().encoder.model_dim;
    let tokens: Vec<Vec<f32>> = encoded.tokens.chunks(dim).map(<[f32]>::to_vec).collect();
    let mut mean = vec![0f64; dim];
    for row in &tokens {
        mean.iter_mut().zip(row).for_each(|(m, v)| *m += f64::from(*v));
    }
    let norm = mean.iter().map(|m| m * m).sum::<f64>().sqrt();
    let mut request = options(5, Mode::Hybrid);
    request.query = "bread".into();
    request.query_vectors =
        Some(cellar_search::QueryVectorsIn { tokens: tokens.clone(), ..Default::default() });
    let alone = index.execute(index.plan(request.clone()).unwrap()).unwrap();
    let pooled = mean.iter().map(|m| (m / norm) as f32).collect();
    request.query_vectors =
        Some(cellar_search::QueryVectorsIn { tokens, pooled: Some(pooled), ..Default::default() });
    let given = index.execute(index.plan(request).unwrap()).unwrap();
    let ids = |r: &cellar_search::SearchResponse| r.hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
    assert_eq!(alone.hits.len(), 5);
    assert_eq!(ids(&alone), ids(&given), "the pooled vector left out is the tokens' normalised mean");
}

/// When the leaves are trained on a sample smaller than the collection, the sample is raised to
/// 16 rows per leaf and one Lloyd step over every row refines them: the rows' mean squared
/// distance to their centroid does not grow, and every document is still in exactly one cluster.
#[test]
fn leaves_trained_on_a_sample_are_refined_over_every_row() {
    use cellar_core::format::FileKind;
    use cellar_core::io::ReaderOptions;
    use cellar_search::ivf::{build_ivf_over, Ivf, IvfBuildOptions, ProbeParams};
    use cellar_search::pooled::PooledWriter;

    use crate::synthetic_ivf::{vector, DIM};
    const DOCS: usize = 3000;
    let dir = tempfile::tempdir().unwrap();
    let mut pooled = PooledWriter::create(dir.path(), DIM).unwrap();
    for i in 0..DOCS {
        pooled.add(&vector(i)).unwrap();
    }
    pooled.finish().unwrap();
    // 100 leaves of 30: a sample of 50 is raised to 1,600 rows, still below the 3,000.
    let options = IvfBuildOptions { cluster_size: 30, train_sample: 50, ..IvfBuildOptions::default() };
    let path = dir.path().join(FileKind::Pooled.file_name());
    let config = build_ivf_over(dir.path(), &path, DIM, DOCS, &options).unwrap();
    assert_eq!(config.train_sample, 1600);
    let refined = config.build.refinement.clone().expect("a sampled IVF is refined");
    assert!(refined.mean_error_after > 0.0, "{refined:?}");
    assert!(refined.mean_error_after <= refined.mean_error_before * (1.0 + 1e-5), "{refined:?}");
    let ivf = Ivf::open(dir.path(), DOCS as u64, DIM, &ReaderOptions::new(ReaderKind::Ram)).unwrap().unwrap();
    let params = ProbeParams { nprobe: ivf.clusters(), depth: 10, oversample: 100.0, rescore: true };
    let (_, stats) = ivf.probe(&vector(7), params).finish().unwrap();
    assert_eq!(stats.codes, DOCS, "every document in one cluster");
    // A collection the sample covers is not refined.
    let whole = IvfBuildOptions { cluster_size: 30, ..IvfBuildOptions::default() };
    assert!(build_ivf_over(dir.path(), &path, DIM, DOCS, &whole).unwrap().build.refinement.is_none());
}
