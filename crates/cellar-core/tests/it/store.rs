//! Writing and reading stores: round trips through every reader, page packing, bad input.

use cellar_core::codec::CodecKind;
use cellar_core::format::PAGE_BYTES;
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::kernels::Isa;
use cellar_core::store::{StoreWriter, VectorStore};
use cellar_core::{CellarError, DocId};

use super::fixture::{self, DIM};

/// Worst error per value of the exact-ish codecs (residual codecs are checked on their own).
fn tolerance(kind: CodecKind) -> f32 {
    match kind {
        CodecKind::F16 => 1e-3,
        CodecKind::Int8 => 1.0 / 127.0,
        other => panic!("{other:?} has no per-value bound"),
    }
}

#[test]
fn every_reader_returns_what_was_written() {
    for kind in [CodecKind::F16, CodecKind::Int8] {
        let dir = tempfile::tempdir().unwrap();
        let docs = fixture::docs(60, 1);
        fixture::write(dir.path(), kind, &docs);
        // Out of order, with a duplicate, to exercise the read planner.
        let ids: Vec<DocId> = [5u32, 0, 59, 3, 3, 17, 10].into_iter().map(DocId).collect();
        for options in fixture::all_reader_options() {
            let store = VectorStore::open(dir.path(), &options).unwrap();
            let batch = store.read_batch(&ids).unwrap();
            assert_eq!(batch.len(), ids.len());
            for (i, id) in ids.iter().enumerate() {
                let rec = batch.record(i);
                let doc = &docs[id.index()];
                assert_eq!(rec.n_tokens, doc.tokens.len() / DIM, "{options:?} doc {id}");
                let mut decoded = Vec::new();
                store.codec().decode(rec.tokens, &mut decoded);
                let worst = decoded.iter().zip(&doc.tokens).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst <= tolerance(kind), "{kind:?} {options:?} doc {id}: error {worst}");
                let mut pooled = Vec::new();
                store.codec().decode(rec.pooled.unwrap(), &mut pooled);
                assert_eq!(pooled.len(), DIM);
            }
            let stats = batch.stats();
            assert!(stats.pages >= 1 && stats.bytes > 0, "{options:?}: {stats:?}");
            if options.kind == ReaderKind::Direct {
                assert!(stats.read_calls >= 1 && stats.bytes == stats.pages * PAGE_BYTES as u64);
            }
        }
    }
}

#[test]
fn readers_agree_on_maxsim_scores() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(40, 2);
    fixture::write(dir.path(), CodecKind::Int8, &docs);
    let query: Vec<f32> = docs[7].tokens[..3 * DIM].to_vec();
    let ids: Vec<DocId> = (0..40).map(DocId).collect();
    let scores: Vec<Vec<f32>> = ReaderKind::ALL
        .into_iter()
        .map(|kind| {
            let store = VectorStore::open(dir.path(), &ReaderOptions::new(kind)).unwrap();
            let prepared = store.codec().prepare_query(&query);
            let batch = store.read_batch(&ids).unwrap();
            (0..batch.len())
                .map(|i| store.codec().maxsim(Isa::Scalar, &prepared, batch.record(i).tokens))
                .collect()
        })
        .collect();
    assert_eq!(scores[0], scores[1]);
    assert_eq!(scores[0], scores[2]);
    let best = scores[0].iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    assert_eq!(best, 7, "the document the query was cut from scores highest");
}

#[test]
fn residual_stores_open_read_and_score_alike_through_every_reader_and_level() {
    let docs = fixture::docs(40, 4);
    let query: Vec<f32> = docs[7].tokens[..3 * DIM].to_vec();
    let ids: Vec<DocId> = (0..40).map(DocId).collect();
    let mut errors = Vec::new();
    for kind in [CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4] {
        let dir = tempfile::tempdir().unwrap();
        fixture::write(dir.path(), kind, &docs);
        let mut reference: Option<Vec<f32>> = None;
        for options in fixture::all_reader_options() {
            let store = VectorStore::open(dir.path(), &options).unwrap();
            assert_eq!(store.codec().kind(), kind);
            let prepared = store.codec().prepare_query(&query);
            let batch = store.read_batch(&ids).unwrap();
            for isa in Isa::available() {
                let scores: Vec<f32> = (0..batch.len())
                    .map(|i| store.codec().maxsim(isa, &prepared, batch.record(i).tokens))
                    .collect();
                match &reference {
                    None => reference = Some(scores),
                    Some(want) => {
                        for (got, want) in scores.iter().zip(want) {
                            assert!(
                                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                                "{kind:?} {options:?} {isa:?}"
                            );
                        }
                    }
                }
            }
        }
        let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Ram)).unwrap();
        let batch = store.read_batch(&ids).unwrap();
        let (mut sum, mut n) = (0f64, 0usize);
        for (i, doc) in docs.iter().enumerate() {
            let mut decoded = Vec::new();
            store.codec().decode(batch.record(i).tokens, &mut decoded);
            assert_eq!(decoded.len(), doc.tokens.len());
            sum += decoded.iter().zip(&doc.tokens).map(|(a, b)| f64::from((a - b) * (a - b))).sum::<f64>();
            n += decoded.len();
        }
        errors.push(sum / n as f64);
    }
    assert!(errors[0] > errors[1] && errors[1] > errors[2], "mean squared errors by bits: {errors:?}");
}

#[test]
fn records_are_packed_into_pages_without_straddling() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(200, 3);
    fixture::write(dir.path(), CodecKind::F16, &docs);
    let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Ram)).unwrap();
    let page = PAGE_BYTES as u64;
    let mut shared_pages = 0;
    let mut previous_page = u64::MAX;
    for i in 0..store.len() {
        let e = store.offsets().get(DocId(i as u32)).unwrap();
        let (first, last) = (e.offset / page, (e.offset + e.len as u64 - 1) / page);
        assert_eq!(e.offset % 8, 0, "records start 8-byte aligned");
        if e.len as u64 <= page {
            assert_eq!(first, last, "doc {i} of {} bytes straddles a page", e.len);
        } else {
            assert_eq!(e.offset % page, 0, "large doc {i} starts on a page boundary");
        }
        shared_pages += (first == previous_page) as usize;
        previous_page = last;
    }
    assert!(shared_pages > 50, "small records share pages ({shared_pages} did)");
    let m = store.manifest();
    assert_eq!(m.counts.docs, 200);
    assert_eq!(m.counts.tokens, docs.iter().map(|d| (d.tokens.len() / DIM) as u64).sum::<u64>());
    assert_eq!(m.bytes_per_token, 2 * DIM);
}

#[test]
fn a_packed_store_places_records_back_to_back_and_every_reader_reads_them() {
    let (paged, packed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let docs = fixture::docs(120, 5);
    fixture::write(paged.path(), CodecKind::F16, &docs);
    let mut writer =
        StoreWriter::create(packed.path(), fixture::codec(CodecKind::F16, &docs), true).unwrap().packed();
    for d in &docs {
        writer.add(&d.tokens, Some(&d.pooled)).unwrap();
    }
    writer.finish().unwrap();
    let open = |dir: &std::path::Path, options: &ReaderOptions| VectorStore::open(dir, options).unwrap();
    let ram = ReaderOptions::new(ReaderKind::Ram);
    let (a, b) = (open(paged.path(), &ram), open(packed.path(), &ram));
    let mut end = None;
    let mut straddling = 0;
    for i in 0..b.len() as u32 {
        let e = b.offsets().get(DocId(i)).unwrap();
        if let Some(end) = end {
            assert_eq!(e.offset, u64::next_multiple_of(end, 8), "doc {i} follows the one before");
        }
        end = Some(e.offset + e.len as u64);
        let (first, last) = cellar_core::format::record::pages_of(e.offset, e.len);
        straddling += usize::from(e.len as u64 <= PAGE_BYTES as u64 && first != last);
        assert_eq!(e.len, a.offsets().get(DocId(i)).unwrap().len, "the same record");
    }
    assert!(straddling > 0, "small records straddle pages when packed");
    let paged_bytes = a.manifest().counts.pages;
    assert!(b.manifest().counts.pages < paged_bytes, "{} vs {paged_bytes} pages", b.manifest().counts.pages);
    // Chunks count the pages a run of packed records really covers: each within its budget.
    let all: Vec<DocId> = (0..b.len() as u32).map(DocId).collect();
    let budget = 4 * PAGE_BYTES;
    let chunks = b.chunks(&all, budget).unwrap();
    assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), all.len());
    assert_eq!(chunks.first().unwrap().start, 0);
    assert!(chunks.windows(2).all(|w| w[0].end == w[1].start));
    let full = chunks.iter().filter(|c| b.read_batch(&all[(*c).clone()]).unwrap().stats().pages == 4).count();
    for chunk in &chunks {
        let pages = b.read_batch(&all[chunk.clone()]).unwrap().stats().pages as usize;
        assert!(pages * PAGE_BYTES <= budget || chunk.len() == 1, "{chunk:?}: {pages} pages");
    }
    assert!(full > 0, "some chunks fill their budget of pages exactly");
    // A run of adjacent records is advised to the kernel as one span; scattered ones are not.
    for options in fixture::all_reader_options() {
        let store = open(packed.path(), &options);
        assert!(store.will_need(&all[10..60]).unwrap(), "{options:?}");
        assert!(!store.will_need(&[DocId(0), DocId(119)]).unwrap(), "{options:?}");
        assert!(!store.will_need(&[]).unwrap());
        assert!(store.will_need(&[DocId(120)]).is_err(), "an id past the store is refused");
    }
    let ids: Vec<DocId> = [7u32, 0, 119, 3, 3, 50, 51, 52].into_iter().map(DocId).collect();
    let query: Vec<f32> = docs[9].tokens[..DIM].to_vec();
    let query = a.codec().prepare_query(&query);
    let expected = a.read_batch(&ids).unwrap();
    for options in fixture::all_reader_options() {
        let batch = open(packed.path(), &options).read_batch(&ids).unwrap();
        for i in 0..ids.len() {
            let (got, want) = (batch.record(i), expected.record(i));
            assert_eq!(
                (got.n_tokens, got.tokens, got.pooled),
                (want.n_tokens, want.tokens, want.pooled),
                "{options:?}"
            );
            let score =
                |r: cellar_core::format::record::RecordView| r.score(a.codec().as_ref(), Isa::Scalar, &query);
            assert_eq!(score(got), score(want), "{options:?}");
        }
    }
}

#[test]
fn a_batch_reads_a_shared_page_once() {
    let dir = tempfile::tempdir().unwrap();
    let docs: Vec<fixture::Doc> =
        (0..10).map(|_| fixture::Doc { tokens: vec![0.5; 2 * DIM], pooled: vec![0.1; DIM] }).collect();
    fixture::write(dir.path(), CodecKind::F16, &docs);
    let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Direct)).unwrap();
    let batch = store.read_batch(&(0..10).map(DocId).collect::<Vec<_>>()).unwrap();
    assert_eq!(batch.stats().pages, 1, "ten 200-byte records live on one page");
    assert_eq!(batch.stats().read_calls, 1);
}

#[test]
fn bad_documents_get_typed_errors_and_leave_the_writer_usable() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(4, 4);
    let mut writer = StoreWriter::create(dir.path(), fixture::codec(CodecKind::F16, &docs), true).unwrap();
    let pooled = vec![0.0f32; DIM];
    let err = writer.add(&[], Some(&pooled)).unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(ref m) if m.contains("empty")), "{err}");
    let err = writer.add(&[0.1; DIM + 1], Some(&pooled)).unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(ref m) if m.contains("whole number")), "{err}");
    let mut nan = vec![0.1; 2 * DIM];
    nan[DIM + 5] = f32::NAN;
    let err = writer.add(&nan, Some(&pooled)).unwrap_err();
    assert!(
        matches!(err, CellarError::InvalidInput(ref m) if m.contains("token 1") && m.contains("dimension 5")),
        "{err}"
    );
    let err = writer.add(&[0.1; DIM], Some(&[0.0; 3])).unwrap_err();
    assert!(matches!(err, CellarError::WrongDimension { expected: DIM, received: 3 }), "{err}");
    let err = writer.add(&[0.1; DIM], None).unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(_)), "{err}");
    assert_eq!(writer.docs(), 0, "rejected documents are not counted");
    writer.add(&docs[0].tokens, Some(&docs[0].pooled)).unwrap();
    writer.finish().unwrap();
    let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Mmap)).unwrap();
    assert_eq!(store.len(), 1);
    let err = store.read_batch(&[DocId(0), DocId(1)]).err().unwrap();
    assert!(matches!(err, CellarError::DocOutOfRange { id: 1, count: 1 }), "{err}");
    assert!(err.is_user_error());
}

#[test]
fn an_empty_store_and_an_occupied_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(1, 5);
    let writer = StoreWriter::create(dir.path(), fixture::codec(CodecKind::F16, &docs), false).unwrap();
    assert!(matches!(writer.finish(), Err(CellarError::InvalidInput(_))));
    fixture::write(dir.path(), CodecKind::F16, &docs);
    let again = StoreWriter::create(dir.path(), fixture::codec(CodecKind::F16, &docs), true);
    assert!(matches!(again, Err(CellarError::InvalidInput(ref m)) if m.contains("already holds")));
}

#[test]
fn an_interrupted_build_leaves_no_index_and_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(5, 6);
    {
        let mut writer =
            StoreWriter::create(dir.path(), fixture::codec(CodecKind::F16, &docs), true).unwrap();
        writer.add(&docs[0].tokens, Some(&docs[0].pooled)).unwrap();
        // Dropped without finish: as if the process stopped mid-build.
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(leftovers.is_empty(), "temp files removed: {leftovers:?}");
    let err = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Ram)).err().unwrap();
    assert!(matches!(err, CellarError::InvalidInput(ref m) if m.contains("manifest.json")), "{err}");
    // A later build in the same directory succeeds and cleans stray temp files.
    std::fs::write(dir.path().join("vectors.bin.cellar-tmp"), b"torn").unwrap();
    fixture::write(dir.path(), CodecKind::F16, &docs);
    assert!(!dir.path().join("vectors.bin.cellar-tmp").exists());
    VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Ram)).unwrap().verify().unwrap();
}

#[test]
fn synthetic_corpus_is_reproducible_and_realistic() {
    use cellar_core::synth::{SynthConfig, SynthCorpus};
    let config = SynthConfig { docs: 300, mean_tokens: 64, dim: 32, clusters: 16, seed: 9 };
    let corpus = SynthCorpus::new(config.clone()).unwrap();
    let (mut a, mut p) = (Vec::new(), Vec::new());
    let (mut b, mut q) = (Vec::new(), Vec::new());
    corpus.doc(17, &mut a, &mut p);
    SynthCorpus::new(config).unwrap().doc(17, &mut b, &mut q);
    assert_eq!(a, b);
    let lengths: Vec<usize> = (0..300)
        .map(|i| {
            corpus.doc(i, &mut a, &mut p);
            a.len() / 32
        })
        .collect();
    let mean = lengths.iter().sum::<usize>() as f64 / 300.0;
    assert!((50.0..80.0).contains(&mean), "mean token count {mean}");
    assert!(lengths.iter().min() < lengths.iter().max(), "token counts vary");
    let dir = tempfile::tempdir().unwrap();
    let manifest = corpus.write_store(dir.path(), CodecKind::Int8, |_| {}).unwrap();
    assert_eq!(manifest.counts.docs, 300);
    assert_eq!(manifest.counts.tokens, lengths.iter().sum::<usize>() as u64);
}

/// `add_many` (a build's batches: whole documents per encoding thread) writes the records
/// `add_passages` writes one by one, byte for byte, passages included; a bad document in a call
/// is named as `add_passages` names it and writes nothing of the call.
#[test]
fn documents_added_together_are_written_byte_for_byte_as_one_by_one() {
    let docs = fixture::docs(40, 11);
    let ends = |i: usize, d: &fixture::Doc| -> Vec<u32> {
        let n = (d.tokens.len() / DIM) as u32;
        if i % 3 == 1 && n >= 2 {
            vec![1, n]
        } else {
            vec![]
        }
    };
    for kind in [CodecKind::F16, CodecKind::Residual2] {
        let codec = fixture::codec(kind, &docs);
        let (single, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = StoreWriter::create(single.path(), codec.clone(), false).unwrap();
        let mut b = StoreWriter::create(many.path(), codec.clone(), false).unwrap();
        let tables: Vec<Vec<u32>> = docs.iter().enumerate().map(|(i, d)| ends(i, d)).collect();
        for (d, e) in docs.iter().zip(&tables) {
            a.add_passages(&d.tokens, None, e).unwrap();
        }
        // Calls of 1, 2, 7 and the remaining 30 documents.
        let mut at = 0;
        for n in [1, 2, 7, 30] {
            let call: Vec<(&[f32], &[u32])> = docs[at..at + n]
                .iter()
                .zip(&tables[at..at + n])
                .map(|(d, e)| (&d.tokens[..], &e[..]))
                .collect();
            let ids = b.add_many(&call).unwrap();
            assert_eq!(ids, (at as u32..(at + n) as u32).map(DocId).collect::<Vec<_>>());
            at += n;
        }
        let bad_dim = [0.5f32; DIM + 1];
        let bad_ends = [5u32, 2];
        for (call, doc, what) in [
            (vec![(&docs[0].tokens[..], &[][..]), (&bad_dim[..], &[][..])], 41, "whole number"),
            (vec![(&docs[1].tokens[..], &[][..]), (&docs[0].tokens[..], &bad_ends[..])], 41, "passage"),
        ] {
            let err = b.add_many(&call).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, CellarError::InvalidInput(_)), "{err:?}");
            assert!(message.contains(&format!("document {doc}")) && message.contains(what), "{message}");
        }
        assert_eq!(b.docs(), 40, "a refused call writes nothing");
        a.finish().unwrap();
        b.finish().unwrap();
        for file in ["vectors.bin", "offsets.bin", "manifest.json"] {
            let read = |dir: &tempfile::TempDir| std::fs::read(dir.path().join(file)).unwrap();
            assert_eq!(read(&single), read(&many), "{kind:?} {file}");
        }
    }
}

#[test]
fn documents_given_encoded_are_written_byte_for_byte_as_encoded_ones() {
    let docs = fixture::docs(12, 9);
    for kind in [CodecKind::F16, CodecKind::Int8, CodecKind::Residual2] {
        let codec = fixture::codec(kind, &docs);
        let (plain, given) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = StoreWriter::create(plain.path(), codec.clone(), false).unwrap();
        let mut b = StoreWriter::create(given.path(), codec.clone(), false).unwrap();
        for doc in &docs {
            let n = doc.tokens.len() / DIM;
            let mut encoded = Vec::new();
            codec.encode_many(&doc.tokens, &mut encoded);
            assert_eq!(a.add(&doc.tokens, None).unwrap(), b.add_encoded(n, &encoded).unwrap());
        }
        let short = b.add_encoded(2, &[0u8; 3]).unwrap_err();
        assert!(matches!(short, CellarError::InvalidInput(_)), "{short:?}");
        assert!(matches!(b.add_encoded(0, &[]).unwrap_err(), CellarError::InvalidInput(_)));
        a.finish().unwrap();
        b.finish().unwrap();
        for file in ["vectors.bin", "offsets.bin"] {
            let read = |dir: &tempfile::TempDir| std::fs::read(dir.path().join(file)).unwrap();
            assert_eq!(read(&plain), read(&given), "{kind:?} {file}");
        }
    }
}

#[test]
fn a_record_of_passages_scores_its_best_passage_through_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(12, 5);
    let codec = fixture::codec(CodecKind::F16, &docs);
    let mut writer = StoreWriter::create(dir.path(), codec.clone(), true).unwrap();
    let mut tables = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let n = (d.tokens.len() / DIM) as u32;
        // Every other document in passages: three when it has the tokens, else two.
        let ends: Vec<u32> = match (i % 2, n) {
            (1, n) if n >= 3 => vec![1, n / 2 + 1, n],
            (1, n) if n >= 2 => vec![1, n],
            _ => vec![],
        };
        writer.add_passages(&d.tokens, Some(&d.pooled), &ends).unwrap();
        tables.push(ends);
    }
    writer.finish().unwrap();
    let query: Vec<f32> = docs[3].tokens[..DIM].to_vec();
    let prepared = codec.prepare_query(&query);
    let ids: Vec<DocId> = (0..12).map(DocId).collect();
    for options in fixture::all_reader_options() {
        let store = VectorStore::open(dir.path(), &options).unwrap();
        let batch = store.read_batch(&ids).unwrap();
        for (i, ends) in tables.iter().enumerate() {
            let rec = batch.record(i);
            let whole = codec.maxsim(Isa::Scalar, &prepared, rec.tokens);
            let score = rec.score(codec.as_ref(), Isa::Scalar, &prepared);
            let ranges: Vec<_> = rec.passages().collect();
            if ends.len() < 2 {
                assert!(rec.passage_ends.is_none());
                assert_eq!(ranges, vec![std::ops::Range { start: 0, end: rec.n_tokens }]);
                assert_eq!(score, whole);
            } else {
                let starts: Vec<usize> = std::iter::once(0).chain(ends.iter().map(|e| *e as usize)).collect();
                assert_eq!(
                    ranges,
                    starts.windows(2).map(|w| w[0]..w[1]).collect::<Vec<_>>(),
                    "{options:?} doc {i}"
                );
                let b = codec.bytes_per_vector();
                let best = ranges
                    .iter()
                    .map(|r| codec.maxsim(Isa::Scalar, &prepared, &rec.tokens[r.start * b..r.end * b]))
                    .fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(score, best, "{options:?} doc {i}");
                assert!(score <= whole + 1e-6, "a passage never beats its whole document's MaxSim");
            }
        }
    }
    // Bad tables are refused and write nothing.
    let dir = tempfile::tempdir().unwrap();
    let mut writer = StoreWriter::create(dir.path(), codec, true).unwrap();
    let d = &docs[0];
    let n = (d.tokens.len() / DIM) as u32;
    for bad in [vec![0, n], vec![2, 1, n], vec![1, n + 1], vec![n + 1]] {
        let err = writer.add_passages(&d.tokens, Some(&d.pooled), &bad).unwrap_err();
        assert!(matches!(err, CellarError::InvalidInput(_)), "{bad:?}: {err}");
    }
    assert_eq!(writer.add_passages(&d.tokens, Some(&d.pooled), &[n]).unwrap(), DocId(0));
}

#[test]
fn a_residual_store_with_uncoded_dimensions_reads_back_and_checks_its_token_size() {
    // Every third dimension nearly constant: 8 of 24 hold almost no residual energy, so the
    // codec leaves them uncoded and a 2-bit token takes 2 + 16 * 2 / 8 = 6 bytes, not 8.
    let mut docs = fixture::docs(30, 9);
    for d in &mut docs {
        for v in d.tokens.chunks_exact_mut(DIM).chain([&mut d.pooled[..]]) {
            (1..DIM).step_by(3).for_each(|k| v[k] = 0.5 + v[k] * 1e-4);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    fixture::write(dir.path(), CodecKind::Residual2, &docs);
    let ids: Vec<DocId> = (0..30).map(DocId).collect();
    for options in fixture::all_reader_options() {
        let store = VectorStore::open(dir.path(), &options).unwrap();
        assert_eq!((store.manifest().bytes_per_token, store.codec().bytes_per_vector()), (6, 6));
        let batch = store.read_batch(&ids).unwrap();
        let query = store.codec().prepare_query(&docs[4].tokens[..2 * DIM]);
        for (i, doc) in docs.iter().enumerate() {
            let rec = batch.record(i);
            let mut decoded = Vec::new();
            store.codec().decode(rec.tokens, &mut decoded);
            for (got, want) in decoded.chunks_exact(DIM).zip(doc.tokens.chunks_exact(DIM)) {
                // The quiet dimensions come back from the centroid, in their own place.
                (1..DIM)
                    .step_by(3)
                    .for_each(|k| assert!((got[k] - want[k]).abs() < 1e-3, "{options:?} doc {i}"));
            }
            let score = store.codec().maxsim(Isa::detected(), &query, rec.tokens);
            let want =
                cellar_core::kernels::maxsim_f32(Isa::Scalar, &docs[4].tokens[..2 * DIM], DIM, &decoded);
            assert!(
                (score - want).abs() < 1e-4 * want.abs().max(1.0),
                "{options:?} doc {i}: {score} against {want}"
            );
        }
    }
    // A manifest that says every dimension is coded (a size it allows) against this codec.bin.
    let path = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("\"bytes_per_token\": 6", "\"bytes_per_token\": 8", 1)).unwrap();
    let err = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Mmap)).err().unwrap();
    assert!(
        matches!(&err, CellarError::Corrupted { path, .. } if path.ends_with("codec.bin"))
            && err.to_string().contains("takes 6 bytes a token, but the manifest says 8"),
        "{err}"
    );
}
