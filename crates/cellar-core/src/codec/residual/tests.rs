//! The residual codec's tests: fits, encoding and decoding against the scalar reference, the
//! parameters' round trip, and given trees.

use super::*;
use crate::codec::CentroidTree;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn sample(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let centers: Vec<f32> = (0..16 * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
    (0..n)
        .flat_map(|_| {
            let c = rng.gen_range(0..16);
            let base = centers[c * dim..(c + 1) * dim].to_vec();
            base.into_iter().map(|x| x + rng.gen_range(-0.2..0.2)).collect::<Vec<f32>>()
        })
        .collect()
}

#[test]
fn centroid_count_follows_plaid_within_its_bounds() {
    assert_eq!(centroid_count(1), 1);
    assert_eq!(centroid_count(100), 100, "16 sqrt(100) = 160: 128 centroids, but no more than the tokens");
    assert_eq!(centroid_count(10_000), 1024);
    assert_eq!(centroid_count(10_000_000), MAX_CENTROIDS);
}

#[test]
fn the_dispatched_quantizer_writes_the_portable_ones_bytes() {
    let dim = 384;
    let data = sample(600, dim, 21);
    for kind in [CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4] {
        let codec = ResidualCodec::fit(kind, dim, &data).unwrap();
        let centroid = codec.centroid(codec.assign(&data[..dim])).to_vec();
        for v in data.chunks_exact(dim).take(20) {
            let (mut dispatched, mut portable) = (Vec::new(), Vec::new());
            codec.quantize(v, &centroid, &mut dispatched);
            codec.quantize_lanes(v, &centroid, &mut portable);
            assert_eq!(dispatched, portable, "{}", kind.name());
            assert_eq!(portable.len(), dim / 8 * codec.bits);
        }
    }
}

#[test]
fn more_bits_reconstruct_closer_and_params_round_trip() {
    let dim = 32;
    let data = sample(3000, dim, 1);
    let mut errors = Vec::new();
    for kind in [CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4] {
        let codec = ResidualCodec::fit(kind, dim, &data).unwrap();
        let again = ResidualCodec::from_params(kind, dim, &codec.params(), Path::new("codec.bin")).unwrap();
        let mut bytes = Vec::new();
        for v in data.chunks_exact(dim).take(200) {
            codec.encode(v, &mut bytes);
        }
        assert_eq!(bytes.len(), 200 * kind.bytes_per_vector(dim));
        let (mut out, mut out_again) = (Vec::new(), Vec::new());
        codec.decode(&bytes, &mut out);
        again.decode(&bytes, &mut out_again);
        assert_eq!(out, out_again, "{kind:?}: decoding differs after the params round trip");
        let err: f32 = out.iter().zip(&data).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / out.len() as f32;
        errors.push(err);
    }
    assert!(errors[0] > errors[1] && errors[1] > errors[2], "mean squared errors {errors:?}");
    assert!(errors[2] < 0.01, "4-bit error {errors:?} against a residual spread of 0.2");
}

/// `sample`, with dimensions `5, 13, ...` (8 of 64) turned nearly constant.
fn sample_with_quiet_dims(n: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let dim = 64;
    let quiet: Vec<usize> = (0..8).map(|i| 5 + 8 * i).collect();
    let mut data = sample(n, dim, seed);
    for row in data.chunks_exact_mut(dim) {
        quiet.iter().for_each(|&k| row[k] = 0.25 + row[k] * 1e-3);
    }
    (data, quiet)
}

#[test]
fn quiet_dimensions_go_uncoded_and_every_path_keeps_the_callers_order() {
    let (data, quiet) = sample_with_quiet_dims(3000, 11);
    let dim = 64;
    for kind in [CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4] {
        let codec = ResidualCodec::fit(kind, dim, &data).unwrap();
        let bits = kind.residual_bits().unwrap();
        assert_eq!(codec.coded_dims(), 56, "{kind:?}");
        assert_eq!(codec.bytes_per_vector(), 2 + 56 * bits / 8);
        assert!(kind.allows_bytes_per_vector(dim, codec.bytes_per_vector()));
        assert!(!kind.allows_bytes_per_vector(dim, kind.bytes_per_vector(dim) + 1));
        assert!(!kind.allows_bytes_per_vector(dim, 2));
        let vs = &data[..100 * dim];
        let (mut one, mut many) = (Vec::new(), Vec::new());
        vs.chunks_exact(dim).for_each(|v| codec.encode(v, &mut one));
        codec.encode_many(vs, &mut many);
        assert_eq!(one, many, "{kind:?}: encode and encode_many differ");
        let mut decoded = Vec::new();
        codec.decode(&one, &mut decoded);
        // Every dimension, quiet or not, comes back near its own value, in the caller's order.
        let mut worst = vec![0f32; dim];
        for (d, v) in decoded.chunks_exact(dim).zip(vs.chunks_exact(dim)) {
            worst.iter_mut().zip(d.iter().zip(v)).for_each(|(w, (a, b))| *w = w.max((a - b).abs()));
        }
        assert!(quiet.iter().all(|&k| worst[k] < 0.01), "{kind:?}: quiet dimensions {worst:?}");
        assert!(worst.iter().all(|w| *w < 0.5), "{kind:?}: {worst:?}");
        // MaxSim of the prepared query on the codes equals MaxSim on the decoded vectors.
        let query = &data[2000 * dim..2004 * dim];
        let prepared = codec.prepare_query(query);
        let got = codec.maxsim(Isa::Scalar, &prepared, &one);
        let want = kernels::maxsim_f32(Isa::Scalar, query, dim, &decoded);
        assert!((got - want).abs() < 1e-4 * want.abs().max(1.0), "{kind:?}: {got} against {want}");
        // The layout survives codec.bin.
        let again = ResidualCodec::from_params(kind, dim, &codec.params(), Path::new("codec.bin")).unwrap();
        assert_eq!(again.bytes_per_vector(), codec.bytes_per_vector());
        let mut decoded_again = Vec::new();
        again.decode(&one, &mut decoded_again);
        assert_eq!(decoded, decoded_again, "{kind:?}");
    }
}

#[test]
fn fit_options_change_the_fit_and_refuse_bad_values() {
    let (data, _) = sample_with_quiet_dims(2000, 13);
    let kind = CodecKind::Residual2;
    let default = ResidualCodec::fit(kind, 64, &data).unwrap();
    let same = ResidualCodec::fit_with(kind, 64, &data, &FitOptions::default()).unwrap();
    assert_eq!(default.params(), same.params(), "the defaults are fit's");
    let seeded = FitOptions { seed: Some(7), ..FitOptions::default() };
    let other = ResidualCodec::fit_with(kind, 64, &data, &seeded).unwrap();
    assert_ne!(default.params(), other.params(), "another seed, other centroids");
    assert_eq!(other.coded_dims(), 56);
    let all = FitOptions { uncoded_energy_max: Some(0.0), ..FitOptions::default() };
    let coded = ResidualCodec::fit_with(kind, 64, &data, &all).unwrap();
    assert_eq!((coded.coded_dims(), coded.bytes_per_vector()), (64, 18));
    for bad in [-0.1, 1.0, f64::NAN] {
        let options = FitOptions { uncoded_energy_max: Some(bad), ..FitOptions::default() };
        let err = ResidualCodec::fit_with(kind, 64, &data, &options).unwrap_err();
        assert!(matches!(err, CellarError::InvalidInput(_)), "{bad}: {err}");
    }
    // 2,000 points take 512 centroids by default; the tree's leaves are the count asked for
    // or a few more (each top cluster's share is rounded up).
    let more = FitOptions { centroids: Some(1024), ..FitOptions::default() };
    let more = ResidualCodec::fit_with(kind, 64, &data, &more).unwrap();
    assert!(default.centroid_count() < 1024 && more.centroid_count() >= 1024, "{}", more.centroid_count());
    for bad in [0, 2001, MAX_CENTROIDS + 1] {
        let options = FitOptions { centroids: Some(bad), ..FitOptions::default() };
        let err = ResidualCodec::fit_with(kind, 64, &data, &options).unwrap_err();
        assert!(matches!(err, CellarError::InvalidInput(_)), "{bad}: {err}");
    }
    // The tree's work: a top level placed on 200 of the 2,000 points, or leaves split in one
    // pass, is another fit; none of either is refused.
    for options in [
        FitOptions { top_fit_points: Some(200), ..FitOptions::default() },
        FitOptions { leaf_iterations: Some(1), ..FitOptions::default() },
    ] {
        let other = ResidualCodec::fit_with(kind, 64, &data, &options).unwrap();
        assert_ne!(default.params(), other.params(), "{options:?}");
    }
    for options in [
        FitOptions { top_fit_points: Some(0), ..FitOptions::default() },
        FitOptions { leaf_iterations: Some(0), ..FitOptions::default() },
    ] {
        let err = ResidualCodec::fit_with(kind, 64, &data, &options).unwrap_err();
        assert!(
            matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains("at least 1"),
            "{err}"
        );
    }
}

/// A tree of `groups` top centroids (`data`'s rows `0, 7, 14, ...`) over `leaves` leaves
/// (rows `0, 7, 14, ...` again, so that no top is without one), each leaf filed under its
/// nearest top, as a tree's own assignment routes it.
fn tree_from_rows(data: &[f32], dim: usize, groups: usize, leaves: usize) -> CentroidTree {
    let row = |i: usize| &data[i * 7 * dim..(i * 7 + 1) * dim];
    let top: Vec<f32> = (0..groups).flat_map(|g| row(g).to_vec()).collect();
    let dist = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>();
    let nearest_top = |v: &[f32]| {
        (0..groups)
            .min_by(|&a, &b| {
                dist(v, &top[a * dim..(a + 1) * dim]).total_cmp(&dist(v, &top[b * dim..(b + 1) * dim]))
            })
            .unwrap()
    };
    let mut filed: Vec<(usize, usize)> = (0..leaves).map(|i| (nearest_top(row(i)), i)).collect();
    filed.sort();
    let mut ranges = vec![0u32; groups + 1];
    filed.iter().for_each(|(g, _)| ranges[g + 1] += 1);
    (0..groups).for_each(|g| ranges[g + 1] += ranges[g]);
    let leaves = filed.iter().flat_map(|&(_, i)| row(i).to_vec()).collect();
    CentroidTree { dim, top, ranges, leaves }
}

#[test]
fn a_given_trees_leaves_are_the_codecs_centroids() {
    let dim = 64;
    let (data, _) = sample_with_quiet_dims(3000, 17);
    let tree = tree_from_rows(&data, dim, 4, 80);
    assert!(tree.ranges.windows(2).all(|w| w[0] < w[1]), "every top has a leaf");
    let options = FitOptions { tree: Some(std::sync::Arc::new(tree.clone())), ..FitOptions::default() };
    for kind in [CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4] {
        let codec = ResidualCodec::fit_with(kind, dim, &data, &options).unwrap();
        assert_eq!(codec.centroid_count(), 80, "{kind:?}");
        // The fit still leaves the quiet dimensions uncoded; the leaves keep their ids.
        assert_eq!(codec.coded_dims(), 56, "{kind:?}");
        for leaf in 0..80 {
            // A token a hair from a leaf takes the leaf's id.
            let v: Vec<f32> = tree.leaves[leaf * dim..(leaf + 1) * dim].iter().map(|x| x + 1e-4).collect();
            let mut bytes = Vec::new();
            codec.encode(&v, &mut bytes);
            assert_eq!(u16::from_le_bytes([bytes[0], bytes[1]]) as usize, leaf, "{kind:?}");
        }
        // Encode, decode and codec.bin round trip as for a fitted tree.
        let vs = &data[..200 * dim];
        let (mut one, mut many) = (Vec::new(), Vec::new());
        vs.chunks_exact(dim).for_each(|v| codec.encode(v, &mut one));
        codec.encode_many(vs, &mut many);
        assert_eq!(one, many, "{kind:?}");
        let mut decoded = Vec::new();
        codec.decode(&one, &mut decoded);
        let err: f32 = decoded.iter().zip(vs).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / vs.len() as f32;
        // The codes recover much of what the leaf alone leaves over (the leaf of each id,
        // in the caller's order: the given tree's row).
        let leaf_only: f32 = one
            .chunks_exact(codec.bytes_per_vector())
            .zip(vs.chunks_exact(dim))
            .map(|(b, v)| {
                let id = u16::from_le_bytes([b[0], b[1]]) as usize;
                let leaf = &tree.leaves[id * dim..(id + 1) * dim];
                v.iter().zip(leaf).map(|(a, b)| (a - b) * (a - b)).sum::<f32>()
            })
            .sum::<f32>()
            / vs.len() as f32;
        let most = [0.7, 0.3, 0.05][kind.residual_bits().unwrap() / 2];
        assert!(err < most * leaf_only, "{kind:?}: mean squared error {err}, {leaf_only} from the leaf");
        let again = ResidualCodec::from_params(kind, dim, &codec.params(), Path::new("codec.bin")).unwrap();
        let mut decoded_again = Vec::new();
        again.decode(&one, &mut decoded_again);
        assert_eq!(decoded, decoded_again, "{kind:?}");
    }
}

#[test]
fn a_given_tree_may_hold_more_leaves_than_a_fit_places() {
    let dim = 8;
    let data = sample(6000, dim, 23);
    // 5,000 leaves (over MAX_CENTROIDS) from the sample's rows, under 50 tops of 100.
    let leaves = data[..5000 * dim].to_vec();
    let top: Vec<f32> = (0..50).flat_map(|g| data[g * 100 * dim..(g * 100 + 1) * dim].to_vec()).collect();
    let ranges = (0..=50).map(|g| g * 100).collect();
    let tree = CentroidTree { dim, top, ranges, leaves };
    let options = FitOptions { tree: Some(std::sync::Arc::new(tree)), ..FitOptions::default() };
    let codec = ResidualCodec::fit_with(CodecKind::Residual2, dim, &data, &options).unwrap();
    assert!(codec.centroid_count() > MAX_CENTROIDS);
    let again =
        ResidualCodec::from_params(CodecKind::Residual2, dim, &codec.params(), Path::new("codec.bin"))
            .unwrap();
    assert_eq!(again.centroid_count(), 5000);
}

#[test]
fn a_given_tree_of_a_bad_shape_is_refused() {
    let dim = 64;
    let (data, _) = sample_with_quiet_dims(1000, 19);
    let good = tree_from_rows(&data, dim, 4, 80);
    let with =
        |tree: CentroidTree| FitOptions { tree: Some(std::sync::Arc::new(tree)), ..FitOptions::default() };
    let mut cases: Vec<(FitOptions, &str)> = vec![
        (with(CentroidTree { dim: 32, ..good.clone() }), "has 32 dimensions, the codec 64"),
        (with(CentroidTree { dim, top: vec![], ranges: vec![0], leaves: vec![] }), "is empty"),
        (with(CentroidTree { leaves: vec![], ..good.clone() }), "is empty"),
        (
            with(CentroidTree { leaves: good.leaves[..good.leaves.len() - 3].to_vec(), ..good.clone() }),
            "whole rows",
        ),
        (with(CentroidTree { top: good.top[..dim].to_vec(), ..good.clone() }), "whole rows"),
    ];
    let r = good.ranges.clone();
    let mut bad_ranges = vec![r.clone(), r.clone(), r.clone(), r.clone()];
    bad_ranges[0][0] = 1;
    bad_ranges[1][4] = 79;
    bad_ranges[2][2] = r[1];
    bad_ranges[3].swap(1, 2);
    for ranges in bad_ranges {
        cases.push((with(CentroidTree { ranges, ..good.clone() }), "ranges do not increase"));
    }
    let mut nan = good.clone();
    nan.leaves[5] = f32::NAN;
    cases.push((with(nan), "not finite"));
    let too_many = CentroidTree {
        dim: 8,
        top: vec![0.5; 8],
        ranges: vec![0, MAX_GIVEN_CENTROIDS as u32 + 1],
        leaves: vec![0.5; 8 * (MAX_GIVEN_CENTROIDS + 1)],
    };
    for (options, says) in cases {
        let err = ResidualCodec::fit_with(CodecKind::Residual2, dim, &data, &options).unwrap_err();
        assert!(
            matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains(says),
            "{says}: {err}"
        );
    }
    let err =
        ResidualCodec::fit_with(CodecKind::Residual2, 8, &sample(100, 8, 3), &with(too_many)).unwrap_err();
    assert!(
        matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains("at most 65536"),
        "{err}"
    );
    // A given tree replaces the k-means: an option that would shape it is refused beside it.
    for options in [
        FitOptions { seed: Some(1), ..with(good.clone()) },
        FitOptions { centroids: Some(80), ..with(good.clone()) },
        FitOptions { top_fit_points: Some(10), ..with(good.clone()) },
        FitOptions { leaf_iterations: Some(1), ..with(good.clone()) },
    ] {
        let err = ResidualCodec::fit_with(CodecKind::Residual2, dim, &data, &options).unwrap_err();
        assert!(
            matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains("replaces the k-means"),
            "{err}"
        );
    }
    assert!(ResidualCodec::fit_with(CodecKind::Residual2, dim, &data, &with(good)).is_ok());
}

#[test]
fn a_damaged_layout_trailer_is_refused() {
    let (data, _) = sample_with_quiet_dims(1000, 12);
    let codec = ResidualCodec::fit(CodecKind::Residual2, 64, &data).unwrap();
    let params = codec.params();
    let trailer = params.len() - 4 * 65;
    let path = Path::new("codec.bin");
    let mut repeated = params.clone();
    repeated.copy_within(params.len() - 8..params.len() - 4, params.len() - 4);
    let mut all_coded = params.clone();
    all_coded[trailer..trailer + 4].copy_from_slice(&64u32.to_le_bytes());
    for (bad, says) in [
        (&repeated[..], "not a permutation"),
        (&all_coded[..], "64 coded dimensions of 64"),
        (&params[..params.len() - 2], "end of data"),
    ] {
        let err = ResidualCodec::from_params(CodecKind::Residual2, 64, bad, path).unwrap_err();
        assert!(matches!(err, CellarError::Corrupted { .. }) && err.to_string().contains(says), "{err}");
    }
}

#[test]
fn a_dimension_not_a_multiple_of_8_and_damaged_params_are_refused() {
    let err = ResidualCodec::fit(CodecKind::Residual2, 12, &vec![0.5; 120]).unwrap_err();
    assert!(err.to_string().contains("multiple of 8"), "{err}");
    let codec = ResidualCodec::fit(CodecKind::Residual2, 8, &sample(500, 8, 2)).unwrap();
    let params = codec.params();
    let path = Path::new("codec.bin");
    for bad in [&params[..params.len() - 1], &params[..8]] {
        let err = ResidualCodec::from_params(CodecKind::Residual2, 8, bad, path).unwrap_err();
        assert!(matches!(err, CellarError::Corrupted { .. }), "{err}");
    }
    let err = ResidualCodec::from_params(CodecKind::Residual4, 8, &params, path).unwrap_err();
    assert!(err.to_string().contains("2-bit"), "{err}");
}
