//! `cellar-bench tokens-met`: how often the token stage meets what exact MaxSim takes (issue 44's
//! 2M gap). For each query's exact top 10 (`cellar-bench exact --exact-cache`) and each query
//! token, it asks whether the document has a token in one of the query token's `nprobe` best
//! routed leaves (the stage then scores the document for that token; otherwise it imputes a
//! floor), and whether `t*`, the document token that MaxSim takes for that query token, is in
//! one. Beside the stage's assignment (each token in its own leaf), two spilled assignments are
//! counted as if built: each token also in its second-nearest leaf (L2), and in the second leaf
//! SOAR would choose (the leaf minimising `|r'|^2 + lambda (r . r')^2 / |r|^2`, `r` the token's
//! residual to its own leaf: residuals that err in different directions). A spilled list holds
//! twice the postings, so a spilled row at nprobe N reads about what the stage reads at 2N.

use std::fmt::Write as _;

use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::kernels::{dot_f16, Isa};
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId, Result};
use cellar_search::names::VECTORS_DIR;
use cellar_search::tokens::quantizer::Quantizer;
use cellar_search::tokens::TokenStage;
use serde::Serialize;

use crate::exact::read_cache;
use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::ivf::common::{QueryArgs, Workload};

/// nprobe values counted (the stage's leaves probed per query token).
const NPROBES: [usize; 8] = [2, 4, 8, 16, 32, 64, 128, 256];
/// Documents of each query's exact ranking looked at.
const TOP: usize = 10;

#[derive(clap::Args)]
pub struct TokensMetArgs {
    /// The index (with a token stage), its collection, the queries' vectors and the sample.
    #[command(flatten)]
    pub queries: QueryArgs,
    /// The exact rankings of the same sample (`cellar-bench exact --exact-cache`).
    #[arg(long)]
    pub exact_cache: std::path::PathBuf,
    /// Groups each query token is routed to (the stage's `route`); repeatable list.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    pub route: Vec<usize>,
    /// SOAR's lambda for the spilled leaf.
    #[arg(long, default_value_t = 1.0)]
    pub soar_lambda: f32,
}

/// Shares of the (query token, exact top-10 document) pairs met at each of [`NPROBES`].
#[derive(Clone, Debug, Default, Serialize)]
struct Met {
    own: Vec<f64>,
    spilled_nearest: Vec<f64>,
    spilled_soar: Vec<f64>,
    star_own: Vec<f64>,
    star_spilled_nearest: Vec<f64>,
    star_spilled_soar: Vec<f64>,
}

#[derive(Serialize)]
struct RouteRow {
    route: usize,
    met: Met,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    queries: usize,
    pairs: u64,
    leaves: usize,
    mean_tokens_of_exact_top10: f64,
    mean_tokens_of_collection: f64,
    soar_lambda: f32,
    nprobes: Vec<usize>,
    rows: Vec<RouteRow>,
}

/// A document's tokens and, per token, its own leaf and the two spilled ones.
struct DocLeaves {
    tokens: Vec<f32>,
    own: Vec<u32>,
    nearest: Vec<u32>,
    soar: Vec<u32>,
}

/// `leaves`: the quantizer's leaves as f32 (`Quantizer::leaves_f32`), `norms` their squared norms.
fn doc_leaves(
    q: &Quantizer,
    isa: Isa,
    (leaves, norms): (&[f32], &[f32]),
    tokens: Vec<f32>,
    lambda: f32,
) -> DocLeaves {
    let dim = q.dim;
    let n = tokens.len() / dim;
    let (mut own, mut nearest, mut soar) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let leaf = |j: usize| &q.leaves[j * 2 * dim..(j + 1) * 2 * dim];
    for t in tokens.chunks_exact(dim) {
        let o = q.assign(isa, t) as usize;
        let tt: f32 = t.iter().map(|x| x * x).sum();
        let to = dot_f16(isa, t, leaf(o));
        // r = t - c_o; |r|^2, and r . t.
        let rr = (tt - 2.0 * to + norms[o]).max(1e-12);
        let r: Vec<f32> = t.iter().zip(&leaves[o * dim..(o + 1) * dim]).map(|(x, c)| x - c).collect();
        let rt: f32 = r.iter().zip(t).map(|(a, b)| a * b).sum();
        let (mut best_l2, mut best_soar) = ((usize::MAX, f32::INFINITY), (usize::MAX, f32::INFINITY));
        for j in (0..norms.len()).filter(|&j| j != o) {
            let tc = dot_f16(isa, t, leaf(j));
            let l2 = tt - 2.0 * tc + norms[j];
            if l2 < best_l2.1 {
                best_l2 = (j, l2);
            }
            // r . r' = r . (t - c_j)
            let rr2 = rt - dot_f16(isa, &r, leaf(j));
            let loss = l2 + lambda * rr2 * rr2 / rr;
            if loss < best_soar.1 {
                best_soar = (j, loss);
            }
        }
        own.push(o as u32);
        nearest.push(best_l2.0 as u32);
        soar.push(best_soar.0 as u32);
    }
    DocLeaves { tokens, own, nearest, soar }
}

pub fn run(args: TokensMetArgs) -> Result<()> {
    if args.queries.query_vectors.is_none() {
        return Err(CellarError::invalid(
            "--query-vectors is required: the sample's exact rankings are of its vectors",
        ));
    }
    if args.route.contains(&0) {
        return Err(CellarError::invalid("--route 0: a query token is routed to at least one group"));
    }
    let Workload { queries, prepared, .. } = args.queries.load()?;
    let exact = read_cache(&args.exact_cache, queries.len())?;
    let options = ReaderOptions::new(ReaderKind::Mmap);
    let store = VectorStore::open(&args.queries.index.join(VECTORS_DIR), &options)?;
    let stage = TokenStage::open(&args.queries.index, 0, store.dim(), &options)?
        .ok_or_else(|| CellarError::invalid("the index has no token stage: `cellar tokens build` first"))?;
    let q = stage.quantizer();
    let isa = Isa::detected();
    let leaves = q.leaves_f32();
    let norms: Vec<f32> = leaves.chunks_exact(q.dim).map(|c| c.iter().map(|x| x * x).sum()).collect();
    let codec = store.codec();
    let bar = cellar_search::progress::bar(queries.len() as u64, "documents' leaves");
    // Every exact top-10 document's leaves, once (queries on two threads).
    let docs: Vec<Vec<DocLeaves>> = std::thread::scope(|scope| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                let (exact, store, codec, bar) = (&exact, &store, &codec, &bar);
                let rows = (leaves.as_slice(), norms.as_slice());
                scope.spawn(move || -> Result<Vec<(usize, Vec<DocLeaves>)>> {
                    let mut out = Vec::new();
                    for (i, ranking) in exact.iter().enumerate().skip(w).step_by(threads) {
                        let ids: Vec<DocId> = ranking.iter().take(TOP).map(|&d| DocId(d)).collect();
                        let batch = store.read_batch(&ids)?;
                        let leaves = (0..ids.len())
                            .map(|k| {
                                let mut tokens = Vec::new();
                                codec.decode(batch.record(k).tokens, &mut tokens);
                                doc_leaves(q, isa, rows, tokens, args.soar_lambda)
                            })
                            .collect();
                        out.push((i, leaves));
                        bar.inc(1);
                    }
                    Ok(out)
                })
            })
            .collect();
        let mut all: Vec<(usize, Vec<DocLeaves>)> = Vec::new();
        for h in handles {
            all.extend(h.join().expect("a thread panicked")?);
        }
        all.sort_by_key(|(i, _)| *i);
        Ok::<_, CellarError>(all.into_iter().map(|(_, d)| d).collect())
    })?;
    bar.finish_and_clear();
    let dim = q.dim;
    let deepest = *NPROBES.last().expect("nprobes");
    let mut rows = Vec::new();
    let mut pairs = 0u64;
    for &route in &args.route {
        let mut counts = [[0u64; NPROBES.len()]; 6];
        pairs = 0;
        // Each query token's rank of every leaf it probed (u32::MAX: not probed), set and reset.
        let mut rank_of = vec![u32::MAX; q.leaves()];
        for (p, docs) in prepared.iter().zip(&docs) {
            let qt = if p.store_tokens.is_empty() { &p.tokens } else { &p.store_tokens };
            let probed = q.probe(isa, qt, deepest, route);
            for (qv, probed) in qt.chunks_exact(dim).zip(&probed) {
                probed.iter().enumerate().for_each(|(r, (j, _))| rank_of[*j as usize] = r as u32);
                let rank = |leaf: &u32| rank_of[*leaf as usize] as usize;
                for doc in docs {
                    pairs += 1;
                    let star = doc
                        .tokens
                        .chunks_exact(dim)
                        .map(|t| qv.iter().zip(t).map(|(a, b)| a * b).sum::<f32>())
                        .enumerate()
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                        .map_or(0, |(k, _)| k);
                    let best = |of: &[u32]| of.iter().map(rank).min().unwrap_or(usize::MAX);
                    let own = best(&doc.own);
                    let ranks = [
                        own,
                        own.min(best(&doc.nearest)),
                        own.min(best(&doc.soar)),
                        rank(&doc.own[star]),
                        rank(&doc.own[star]).min(rank(&doc.nearest[star])),
                        rank(&doc.own[star]).min(rank(&doc.soar[star])),
                    ];
                    for (c, r) in counts.iter_mut().zip(ranks) {
                        for (slot, &n) in c.iter_mut().zip(&NPROBES) {
                            *slot += u64::from(r < n);
                        }
                    }
                }
                probed.iter().for_each(|(j, _)| rank_of[*j as usize] = u32::MAX);
            }
        }
        let share = |c: &[u64; NPROBES.len()]| c.iter().map(|&x| x as f64 / pairs.max(1) as f64).collect();
        let met = Met {
            own: share(&counts[0]),
            spilled_nearest: share(&counts[1]),
            spilled_soar: share(&counts[2]),
            star_own: share(&counts[3]),
            star_spilled_nearest: share(&counts[4]),
            star_spilled_soar: share(&counts[5]),
        };
        rows.push(RouteRow { route, met });
    }
    let top_tokens: usize = docs.iter().flatten().map(|d| d.own.len()).sum();
    let looked = docs.iter().map(Vec::len).sum::<usize>().max(1);
    let config = stage.config();
    let report = Report {
        provenance: Provenance::now(),
        queries: queries.len(),
        pairs,
        leaves: q.leaves(),
        mean_tokens_of_exact_top10: top_tokens as f64 / looked as f64,
        mean_tokens_of_collection: config.tokens as f64 / config.docs.max(1) as f64,
        soar_lambda: args.soar_lambda,
        nprobes: NPROBES.to_vec(),
        rows,
    };
    let markdown = markdown(&report, &args);
    write_report(&args.queries.out, &report, &markdown)?;
    print!("{markdown}");
    Ok(())
}

fn markdown(r: &Report, args: &TokensMetArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Does the token stage meet what exact MaxSim takes?\n");
    let _ = writeln!(s, "{}\n", r.provenance.markdown());
    let _ = writeln!(
        s,
        "Index `{}`: {} leaves; {} judged queries as vectors, their exact top {TOP} from `{}`: {} (query token, document) pairs. Mean tokens of those documents {:.1} (of the collection {:.1}). SOAR lambda {}.\n",
        args.queries.index.display(),
        r.leaves,
        r.queries,
        args.exact_cache.display(),
        r.pairs,
        r.mean_tokens_of_exact_top10,
        r.mean_tokens_of_collection,
        r.soar_lambda
    );
    let _ = writeln!(s, "`met`: the document has a token in one of the query token's nprobe best routed leaves. `t* met`: the token MaxSim takes for that query token is in one. `+nearest`, `+SOAR`: each token also listed under its second leaf (lists twice as long).\n");
    for row in &r.rows {
        let _ = writeln!(s, "## route {}\n", row.route);
        let _ = writeln!(
            s,
            "| nprobe | met | met +nearest | met +SOAR | t* met | t* met +nearest | t* met +SOAR |"
        );
        let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|");
        let m = &row.met;
        for (i, n) in r.nprobes.iter().enumerate() {
            let _ = writeln!(
                s,
                "| {n} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                m.own[i],
                m.spilled_nearest[i],
                m.spilled_soar[i],
                m.star_own[i],
                m.star_spilled_nearest[i],
                m.star_spilled_soar[i]
            );
        }
        let _ = writeln!(s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellar_core::cluster::Points;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn the_spilled_leaves_are_the_nearest_other_one_and_soars_choice() {
        let dim = 8;
        let mut rng = StdRng::seed_from_u64(5);
        let data: Vec<f32> = (0..2000 * dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let q = Quantizer::train(&Points { data: &data, dim }, 64, 1);
        let leaves = q.leaves_f32();
        let norms: Vec<f32> = leaves.chunks_exact(dim).map(|c| c.iter().map(|x| x * x).sum()).collect();
        let isa = Isa::Scalar;
        let tokens: Vec<f32> = data[..50 * dim].to_vec();
        let lambda = 4.0;
        let got = doc_leaves(&q, isa, (&leaves, &norms), tokens.clone(), lambda);
        let mut soar_differs = 0;
        for (i, t) in tokens.chunks_exact(dim).enumerate() {
            let own = got.own[i] as usize;
            assert_eq!(own, q.assign(isa, t) as usize, "token {i}: its own leaf is the stage's");
            let c = |j: usize| &leaves[j * dim..(j + 1) * dim];
            let l2 = |j: usize| t.iter().zip(c(j)).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>();
            let r: Vec<f64> = t.iter().zip(c(own)).map(|(a, b)| f64::from(a - b)).collect();
            let rr: f64 = r.iter().map(|x| x * x).sum();
            let soar = |j: usize| {
                let rr2: f64 = r.iter().zip(t.iter().zip(c(j))).map(|(x, (a, b))| x * f64::from(a - b)).sum();
                l2(j) + f64::from(lambda) * rr2 * rr2 / rr
            };
            let others = || (0..q.leaves()).filter(|&j| j != own);
            let nearest = others().min_by(|&a, &b| l2(a).total_cmp(&l2(b))).unwrap();
            let chosen = others().min_by(|&a, &b| soar(a).total_cmp(&soar(b))).unwrap();
            assert_ne!(got.nearest[i] as usize, own);
            assert!(
                (l2(got.nearest[i] as usize) - l2(nearest)).abs() < 1e-3,
                "token {i}: nearest other leaf"
            );
            assert!((soar(got.soar[i] as usize) - soar(chosen)).abs() < 1e-3, "token {i}: SOAR's leaf");
            soar_differs += usize::from(got.soar[i] != got.nearest[i]);
        }
        assert!(soar_differs > 0, "SOAR's penalty changes some choices");
    }
}
