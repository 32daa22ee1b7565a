//! Every kernel level this CPU can run must agree with the scalar reference: seeded random
//! shapes (odd dims, dims below a vector width, empty queries and documents, misaligned f16
//! records) plus hand-computed answers.

use cellar_core::kernels::residual::ResidualTables;
use cellar_core::kernels::signs::{estimate_scalar, SignTables};
use cellar_core::kernels::{
    decode_residual, dot_f16, dot_i8, estimate_signs, maxsim_f16, maxsim_f32, maxsim_i8, Isa,
};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Dims around every vector width and tail boundary the kernels have.
const EDGE_DIMS: [usize; 14] = [1, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 384];

fn simd_levels() -> Vec<Isa> {
    Isa::available().into_iter().filter(|&isa| isa != Isa::Scalar).collect()
}

fn f16_bytes(values: &[f32], offset: usize) -> Vec<u8> {
    let mut bytes = vec![0xAB; offset];
    for &v in values {
        bytes.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
    }
    bytes
}

fn f16_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
}

fn normals(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.sample::<f32, _>(StandardNormal) * scale).collect()
}

/// Worst-case rounding bound for a MaxSim computed in any order with f32 arithmetic:
/// each dot product of `dim` terms is off by at most about `dim * eps * sum|q_k d_k|`, a max
/// moves by no more than its arguments do, and summing `nq` maxima adds `nq * eps * sum|max|`.
/// Doubled for slack, it stays far below the size of one missing term or a wrong maximum.
fn tolerance(query: &[f32], doc: &[f32], dim: usize) -> f64 {
    let nq = query.len() / dim;
    let mut scale = 0.0f64;
    for q in query.chunks_exact(dim) {
        let worst = doc
            .chunks_exact(dim)
            .map(|d| q.iter().zip(d).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum::<f64>())
            .fold(0.0f64, f64::max);
        scale += worst;
    }
    2.0 * (dim + nq + 2) as f64 * f32::EPSILON as f64 * scale + 1e-30
}

fn assert_close(what: &str, isa: Isa, got: f32, want: f32, tol: f64) {
    let err = (got as f64 - want as f64).abs();
    assert!(err <= tol, "{what} on {}: got {got}, scalar {want}, |err| {err:e} > tol {tol:e}", isa.name());
}

fn random_dim(rng: &mut StdRng, case: usize) -> usize {
    if case.is_multiple_of(2) {
        EDGE_DIMS[(case / 2) % EDGE_DIMS.len()]
    } else {
        rng.gen_range(1..=300)
    }
}

#[test]
fn detected_is_the_best_available_level() {
    let available = Isa::available();
    assert_eq!(available.first(), Some(&Isa::Scalar));
    assert_eq!(available.last(), Some(&Isa::detected()));
    assert!(available.windows(2).all(|w| w[0] < w[1]), "levels out of order: {available:?}");
}

#[test]
fn maxsim_f16_matches_scalar() {
    let mut rng = StdRng::seed_from_u64(0x05EE_DF16);
    for case in 0..300 {
        let dim = random_dim(&mut rng, case);
        let (nq, nd) = (rng.gen_range(0..=40), rng.gen_range(0..=70));
        let query = normals(&mut rng, nq * dim, 1.0);
        let offset = case % 3; // 1 byte off makes every f16 record misaligned
        let stored = f16_bytes(&normals(&mut rng, nd * dim, 0.5), offset);
        let doc = &stored[offset..];
        let want = maxsim_f16(Isa::Scalar, &query, dim, doc);
        let tol = tolerance(&query, &f16_values(doc), dim);
        for isa in simd_levels() {
            let got = maxsim_f16(isa, &query, dim, doc);
            let what = format!("maxsim_f16 case {case} (dim {dim}, nq {nq}, nd {nd}, off {offset})");
            assert_close(&what, isa, got, want, tol);
        }
    }
}

#[test]
fn maxsim_i8_matches_scalar() {
    let mut rng = StdRng::seed_from_u64(0x05EE_D018);
    for case in 0..300 {
        let dim = random_dim(&mut rng, case);
        let (nq, nd) = (rng.gen_range(0..=40), rng.gen_range(0..=70));
        // Scale-folded queries are small; codes span the whole i8 range.
        let query = normals(&mut rng, nq * dim, 0.01);
        let offset = case % 3;
        let stored: Vec<i8> = (0..offset + nd * dim).map(|_| rng.gen()).collect();
        let doc = &stored[offset..];
        let want = maxsim_i8(Isa::Scalar, &query, dim, doc);
        let doc_f32: Vec<f32> = doc.iter().map(|&c| c as f32).collect();
        let tol = tolerance(&query, &doc_f32, dim);
        for isa in simd_levels() {
            let got = maxsim_i8(isa, &query, dim, doc);
            let what = format!("maxsim_i8 case {case} (dim {dim}, nq {nq}, nd {nd}, off {offset})");
            assert_close(&what, isa, got, want, tol);
        }
    }
}

#[test]
fn maxsim_f32_matches_scalar() {
    let mut rng = StdRng::seed_from_u64(0x05EE_DF32);
    for case in 0..300 {
        let dim = random_dim(&mut rng, case);
        let (nq, nd) = (rng.gen_range(0..=40), rng.gen_range(0..=70));
        let query = normals(&mut rng, nq * dim, 1.0);
        let doc = normals(&mut rng, nd * dim, 0.5);
        let want = maxsim_f32(Isa::Scalar, &query, dim, &doc);
        let tol = tolerance(&query, &doc, dim);
        for isa in simd_levels() {
            let got = maxsim_f32(isa, &query, dim, &doc);
            assert_close(
                &format!("maxsim_f32 case {case} (dim {dim}, nq {nq}, nd {nd})"),
                isa,
                got,
                want,
                tol,
            );
        }
    }
}

/// Random residual tokens (any centroid id below `k`, any codes) and the tables they index.
struct ResidualCase {
    dim: usize,
    /// Dimensions with codes; those past it decode to the centroid.
    coded: usize,
    bits: usize,
    centroids: Vec<f32>,
    scales: Vec<f32>,
    weights: Vec<f32>,
    doc: Vec<u8>,
}

impl ResidualCase {
    fn random(rng: &mut StdRng, dim: usize, coded: usize, bits: usize, nd: usize) -> ResidualCase {
        let k = rng.gen_range(1..=40);
        let centroids = normals(rng, k * dim, 0.3);
        let scales: Vec<f32> = (0..coded).map(|_| rng.gen_range(0.01..0.2)).collect();
        let mut weights = normals(rng, 1 << bits, 1.0);
        weights.sort_by(f32::total_cmp);
        let token_bytes = 2 + coded * bits / 8;
        let mut doc = Vec::with_capacity(nd * token_bytes);
        for _ in 0..nd {
            doc.extend_from_slice(&rng.gen_range(0..k as u16).to_le_bytes());
            doc.extend((0..coded * bits / 8).map(|_| rng.gen::<u8>()));
        }
        ResidualCase { dim, coded, bits, centroids, scales, weights, doc }
    }

    fn tables(&self) -> ResidualTables<'_> {
        ResidualTables {
            dim: self.dim,
            coded: self.coded,
            bits: self.bits,
            centroids: &self.centroids,
            scales: &self.scales,
            weights: &self.weights,
        }
    }

    fn decode(&self, isa: Isa) -> Vec<f32> {
        let mut out = vec![f32::NAN; self.doc.len() / self.tables().token_bytes() * self.dim];
        decode_residual(isa, &self.tables(), &self.doc, &mut out);
        out
    }
}

#[test]
fn residual_decoding_matches_scalar_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(0x05EE_D2E5);
    for case in 0..240 {
        let dim = 8 * rng.gen_range(1..=48);
        // Every other case leaves some groups of 8 uncoded (odd and even group counts both).
        let coded = if case % 2 == 0 { dim } else { 8 * rng.gen_range(1..=dim / 8) };
        let bits = [1, 2, 4][case % 3];
        let nd = rng.gen_range(0..=30);
        let c = ResidualCase::random(&mut rng, dim, coded, bits, nd);
        let want = c.decode(Isa::Scalar);
        for (j, row) in want.chunks_exact(dim).enumerate() {
            let id = u16::from_le_bytes([
                c.doc[j * c.tables().token_bytes()],
                c.doc[j * c.tables().token_bytes() + 1],
            ]);
            let centroid = &c.centroids[id as usize * dim..(id as usize + 1) * dim];
            assert_eq!(
                row[coded..],
                centroid[coded..],
                "case {case}: an uncoded dimension is not the centroid's"
            );
        }
        for isa in simd_levels() {
            let got = c.decode(isa);
            let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "residual decode case {case} (dim {dim}, coded {coded}, bits {bits}, nd {nd}) differs on {}",
                isa.name()
            );
        }
    }
}

#[test]
fn residual_codes_decode_to_their_bucket_by_hand() {
    // dim 8, 2 bits, one centroid of 1.0, scales 0.5: codes 0,1,2,3,3,2,1,0 pick weights
    // [-2, -1, 1, 2] → 1 + 0.5 * w.
    let word: u16 = [0u16, 1, 2, 3, 3, 2, 1, 0].iter().enumerate().fold(0, |w, (t, c)| w | (c << (2 * t)));
    let mut doc = vec![0u8, 0];
    doc.extend_from_slice(&word.to_le_bytes());
    let c = ResidualCase {
        dim: 8,
        coded: 8,
        bits: 2,
        centroids: vec![1.0; 8],
        scales: vec![0.5; 8],
        weights: vec![-2.0, -1.0, 1.0, 2.0],
        doc,
    };
    for isa in Isa::available() {
        assert_eq!(c.decode(isa), [0.0, 0.5, 1.5, 2.0, 2.0, 1.5, 0.5, 0.0], "{}", isa.name());
    }
}

#[test]
#[should_panic(expected = "names centroid 3 of 2")]
fn a_residual_token_past_the_centroid_table_panics_instead_of_reading_out_of_bounds() {
    let c = ResidualCase {
        dim: 8,
        coded: 8,
        bits: 1,
        centroids: vec![0.0; 16],
        scales: vec![1.0; 8],
        weights: vec![-1.0, 1.0],
        doc: vec![3, 0, 0xFF],
    };
    c.decode(*Isa::available().last().unwrap());
}

#[test]
fn dots_match_scalar() {
    let mut rng = StdRng::seed_from_u64(0x05EE_DD07);
    for case in 0..400 {
        let len = if case < 20 { case } else { random_dim(&mut rng, case) };
        let a = normals(&mut rng, len, 1.0);
        let offset = case % 2;
        let stored = f16_bytes(&normals(&mut rng, len, 1.0), offset);
        let b16 = &stored[offset..];
        let b8: Vec<i8> = (0..len).map(|_| rng.gen()).collect();
        let b8_f32: Vec<f32> = b8.iter().map(|&c| c as f32).collect();
        let want16 = dot_f16(Isa::Scalar, &a, b16);
        let want8 = dot_i8(Isa::Scalar, &a, &b8);
        let (tol16, tol8) = if len == 0 {
            (0.0, 0.0)
        } else {
            (tolerance(&a, &f16_values(b16), len), tolerance(&a, &b8_f32, len))
        };
        for isa in simd_levels() {
            assert_close(&format!("dot_f16 len {len}"), isa, dot_f16(isa, &a, b16), want16, tol16);
            assert_close(&format!("dot_i8 len {len}"), isa, dot_i8(isa, &a, &b8), want8, tol8);
        }
    }
}

#[test]
fn empty_query_or_document_scores_zero() {
    for isa in Isa::available() {
        for dim in [1, 16, 129] {
            let query = vec![0.5f32; 3 * dim];
            assert_eq!(maxsim_f16(isa, &query, dim, &[]), 0.0, "{}", isa.name());
            assert_eq!(maxsim_i8(isa, &query, dim, &[]), 0.0, "{}", isa.name());
            let doc16 = f16_bytes(&vec![1.0; 2 * dim], 0);
            assert_eq!(maxsim_f16(isa, &[], dim, &doc16), 0.0, "{}", isa.name());
            assert_eq!(maxsim_i8(isa, &[], dim, &vec![1i8; 2 * dim]), 0.0, "{}", isa.name());
        }
    }
}

#[test]
fn small_known_answer() {
    // q0 = [1, 2, 3], q1 = [-1, 0, 0.5].
    let query = [1.0, 2.0, 3.0, -1.0, 0.0, 0.5];
    // f16 docs d0 = [1, 0, -1], d1 = [0.5, 0.5, 0.5]:
    //   q0.d0 = -2, q0.d1 = 3 -> 3;  q1.d0 = -1.5, q1.d1 = -0.25 -> -0.25;  total 2.75.
    let doc16 = f16_bytes(&[1.0, 0.0, -1.0, 0.5, 0.5, 0.5], 1);
    // i8 docs d0 = [2, 0, -1], d1 = [1, 1, 1]:
    //   q0.d0 = -1, q0.d1 = 6 -> 6;  q1.d0 = -2.5, q1.d1 = -0.5 -> -0.5;  total 5.5.
    let doc8 = [2i8, 0, -1, 1, 1, 1];
    for isa in Isa::available() {
        assert_eq!(maxsim_f16(isa, &query, 3, &doc16[1..]), 2.75, "{}", isa.name());
        assert_eq!(maxsim_i8(isa, &query, 3, &doc8), 5.5, "{}", isa.name());
        assert_eq!(dot_f16(isa, &query[..3], &doc16[7..]), 3.0, "{}", isa.name());
        assert_eq!(dot_i8(isa, &query[3..], &doc8[..3]), -2.5, "{}", isa.name());
    }
}

#[test]
fn larger_known_answer() {
    // 20 query tokens in dim 19: q_i = s_i * (i + 1) * e_(i mod 19), s_i = +1 for even i and
    // -1 for odd i. 9 doc tokens d_j = (j - 4) * [1; 19]. So q_i.d_j = s_i * (i + 1) * (j - 4),
    // maximised at j = 8 (even i) or j = 0 (odd i) with value 4 * (i + 1): total 4 * 210.
    let (dim, nq, nd) = (19, 20, 9);
    let mut query = vec![0.0f32; nq * dim];
    for i in 0..nq {
        let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
        query[i * dim + i % dim] = sign * (i + 1) as f32;
    }
    let doc: Vec<f32> = (0..nd * dim).map(|e| (e / dim) as f32 - 4.0).collect();
    let doc16 = f16_bytes(&doc, 1);
    let doc8: Vec<i8> = doc.iter().map(|&v| v as i8).collect();
    for isa in Isa::available() {
        assert_eq!(maxsim_f16(isa, &query, dim, &doc16[1..]), 840.0, "{}", isa.name());
        assert_eq!(maxsim_i8(isa, &query, dim, &doc8), 840.0, "{}", isa.name());
    }
}

fn sign_code(rng: &mut StdRng, dim: usize) -> Vec<u8> {
    let mut code = vec![0u8; dim.div_ceil(8)];
    for i in 0..dim {
        if rng.gen_bool(0.5) {
            code[i / 8] |= 1 << (i % 8);
        }
    }
    code
}

/// How far a quantised `<q, s>` may be from the exact one: half a step of the tables' scale
/// (step = 2 / scale, scale = 127 / the widest half byte's sum of |q|) for each half byte.
fn sign_bound(q: &[f32]) -> f32 {
    let widest = q.chunks(4).map(|c| c.iter().map(|v| v.abs()).sum::<f32>()).fold(0f32, f32::max);
    (2 * q.len().div_ceil(8)) as f32 * widest / 127.0
}

#[test]
fn the_quantised_sign_sum_is_within_half_a_step_per_half_byte_of_the_exact_one() {
    let mut rng = StdRng::seed_from_u64(11);
    for dim in [1, 7, 8, 13, 64, 128, 384] {
        let mut q: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
        q.iter_mut().for_each(|x| *x /= norm);
        let tables = SignTables::new(&q);
        for _ in 0..50 {
            let code = sign_code(&mut rng, dim);
            let exact: f32 = q
                .iter()
                .enumerate()
                .map(|(i, v)| if code[i / 8] >> (i % 8) & 1 == 1 { *v } else { -v })
                .sum();
            let bound = sign_bound(&q) + 1e-4;
            let got = tables.signed_sum(&code);
            assert!((got - exact).abs() <= bound, "dim {dim}: {got} vs {exact} (bound {bound})");
        }
    }
}

#[test]
fn a_zero_query_gives_a_zero_sign_sum() {
    let tables = SignTables::new(&[0.0; 16]);
    assert_eq!(tables.signed_sum(&[0xff, 0x0f]), 0.0);
}

#[test]
fn sign_estimates_agree_with_the_scalar_reference_to_the_bit() {
    let mut rng = StdRng::seed_from_u64(12);
    for dim in [8, 64, 128, 256, 384] {
        let q = normals(&mut rng, dim, 0.1);
        let tables = SignTables::new(&q);
        for n in [1, 5, 31, 32] {
            let codes: Vec<u8> = (0..n).flat_map(|_| sign_code(&mut rng, dim)).collect();
            let factors: Vec<u8> = (0..n)
                .flat_map(|_| f16::from_f32(rng.gen_range(0.0f32..0.2)).to_bits().to_le_bytes())
                .collect();
            let mut reference = vec![0f32; n];
            estimate_scalar(&tables, 0.25, &codes, &factors, &mut reference);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; n];
                estimate_signs(isa, &tables, 0.25, &codes, &factors, &mut got);
                let same = got.iter().zip(&reference).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{} at dim {dim}, {n} postings: {got:?} vs {reference:?}", isa.name());
            }
        }
    }
}

#[test]
fn codes_with_every_bit_set_or_none_reach_the_sign_extremes_on_every_level() {
    // All set: every value counted positive; none: every value negative.
    let q: Vec<f32> = (0..128).map(|i| (i as f32 - 63.5) / 512.0).collect();
    let tables = SignTables::new(&q);
    let total: f32 = q.iter().sum();
    let bound = sign_bound(&q) + 1e-5;
    assert!((tables.signed_sum(&[0xff; 16]) - total).abs() <= bound);
    assert!((tables.signed_sum(&[0x00; 16]) + total).abs() <= bound);
    let codes: Vec<u8> = [[0xffu8; 16], [0x00; 16]].iter().cycle().take(32).flatten().copied().collect();
    let factors: Vec<u8> = std::iter::repeat_n(f16::ONE.to_bits().to_le_bytes(), 32).flatten().collect();
    for isa in Isa::available() {
        let mut got = [0f32; 32];
        estimate_signs(isa, &tables, 0.0, &codes, &factors, &mut got);
        assert!(
            (got[0] - total).abs() <= bound && (got[1] + total).abs() <= bound,
            "{}: {got:?}",
            isa.name()
        );
    }
}
