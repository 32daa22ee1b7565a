//! PCA: recovery of a planted subspace, file round trip, corruption and argument errors.

use cellar_encode::{CellarError, Pca};

/// Deterministic pseudo-random values in [-1, 1).
fn noise(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

/// `rows` points `mean + sum_k z_k * scale_k * axis_k + small noise` in `dim` dimensions, with
/// orthonormal axes (Gram-Schmidt on random vectors). Returns (points, axes).
fn planted(dim: usize, rows: usize, scales: &[f32]) -> (Vec<f32>, Vec<Vec<f32>>) {
    let mut axes: Vec<Vec<f32>> = Vec::new();
    for k in 0..scales.len() {
        let mut v = noise(100 + k as u64, dim);
        for a in &axes {
            let d: f32 = v.iter().zip(a).map(|(x, y)| x * y).sum();
            v.iter_mut().zip(a).for_each(|(x, y)| *x -= d * y);
        }
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        axes.push(v);
    }
    let z = noise(1, rows * scales.len());
    let eps = noise(2, rows * dim);
    let mut out = vec![0f32; rows * dim];
    for r in 0..rows {
        for (c, o) in out[r * dim..(r + 1) * dim].iter_mut().enumerate() {
            *o = 3.0 + 0.01 * eps[r * dim + c];
            for (k, a) in axes.iter().enumerate() {
                *o += z[r * scales.len() + k] * scales[k] * a[c];
            }
        }
    }
    (out, axes)
}

#[test]
fn recovers_a_planted_subspace() {
    let (dim, scales) = (32, [5.0, 3.0, 2.0]);
    let (sample, axes) = planted(dim, 2000, &scales);
    let pca = Pca::fit(&sample, dim, 3).expect("fit");
    assert_eq!((pca.in_dim(), pca.out_dim()), (32, 3));
    let v = pca.variances();
    assert!(v[0] > v[1] && v[1] > v[2] && v[2] > 0.5, "variances {v:?}");
    // Each planted axis lies (almost) inside the span of the fitted components: its projection
    // (axes are unit, the mean cancels in a difference) keeps its length.
    for a in &axes {
        let origin = pca.project(&vec![0.0; dim]);
        let tip = pca.project(a);
        let len: f32 = tip.iter().zip(&origin).map(|(t, o)| (t - o) * (t - o)).sum::<f32>().sqrt();
        assert!(len > 0.999, "planted axis keeps only {len} of its length");
    }
    let rows = pca.project_normalized(&sample[..4 * dim]);
    assert_eq!(rows.len(), 4 * 3);
    for r in rows.chunks(3) {
        assert!((r.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
    }
}

#[test]
fn fits_384_dimensions() {
    let (sample, _) = planted(384, 3000, &[4.0, 2.0, 1.0]);
    let pca = Pca::fit(&sample, 384, 128).expect("fit");
    assert_eq!(pca.out_dim(), 128);
    let v = pca.variances();
    assert!(v.windows(2).all(|w| w[0] >= w[1]), "variances not descending");
    assert!(v[2] > 0.1 && v[3] < 0.01, "the three planted axes carry the variance: {:?}", &v[..4]);
}

#[test]
fn save_load_round_trip_and_corruption() {
    let (sample, _) = planted(16, 200, &[2.0, 1.0]);
    let pca = Pca::fit(&sample, 16, 4).expect("fit");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pca.bin");
    pca.save(&path).expect("save");
    assert_eq!(Pca::load(&path).expect("load"), pca);

    let good = std::fs::read(&path).expect("read");
    let mut flipped = good.clone();
    flipped[40] ^= 0x10;
    let cases: [(&str, Vec<u8>); 4] = [
        ("flipped byte", flipped),
        ("truncated", good[..good.len() - 9].to_vec()),
        ("bad magic", [b"NOTAPCA!".as_slice(), &good[8..]].concat()),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in cases {
        std::fs::write(&path, bytes).expect("write");
        match Pca::load(&path) {
            Err(CellarError::Corrupted { path: p, .. }) => assert_eq!(p, path, "{what}"),
            other => panic!("{what}: expected Corrupted, got {other:?}"),
        }
    }
    assert!(matches!(Pca::load(&dir.path().join("missing")), Err(CellarError::Io { .. })));

    // A newer version whose other bytes changed (so its checksum fails) names both versions.
    let mut newer = good.clone();
    let (readable, found) = (Pca::READABLE_VERSIONS, Pca::READABLE_VERSIONS.newest + 1);
    newer[8..12].copy_from_slice(&found.to_le_bytes());
    newer[12..20].fill(0xff);
    std::fs::write(&path, newer).expect("write");
    match Pca::load(&path) {
        Err(CellarError::Incompatible { found: f, oldest, newest, .. }) => {
            assert_eq!((f, oldest, newest), (found, readable.oldest, readable.newest))
        }
        other => panic!("expected Incompatible, got {other:?}"),
    }
}

#[test]
fn bad_arguments_are_invalid_input() {
    let ok = noise(3, 40);
    let mut nan = ok.clone();
    nan[5] = f32::NAN;
    let cases: [(&[f32], usize, usize); 6] =
        [(&ok, 4, 5), (&ok, 4, 0), (&ok, 0, 0), (&ok, 3, 2), (&ok[..4], 4, 2), (&nan, 4, 2)];
    for (sample, dim, out) in cases {
        assert!(matches!(Pca::fit(sample, dim, out), Err(CellarError::InvalidInput(_))), "{dim} {out}");
    }
}
