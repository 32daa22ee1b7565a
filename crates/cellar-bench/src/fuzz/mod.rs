//! `cellar-bench fuzz`: structure-aware random fuzzing of every byte parser (issue 16.3). Seeds
//! are real files from Cellar's own writers (`seeds`); each execution mutates one (`mutate`),
//! recomputes its checksums half the time (the target's fix-up), and hands it to the parser
//! (`targets`), which must accept or refuse it with a typed error, never panic. A panic is
//! caught, counted and its input saved; an allocation of more than 1 GiB (what a length field
//! asks for, never what a file of at most 1 MiB needs) aborts the process, and the input being
//! run is then in `<scratch>/current-<target>.bin`, written before every execution. Hangs show
//! as the slowest execution's time. The report counts executions, inputs accepted, refusals by
//! error code and panics per target, with the CPU it ran on.

mod mutate;
mod seeds;
mod targets;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cellar_core::stats::as_ms;
use cellar_core::{CellarError, IoContext, Result};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use mutate::Mutator;
use targets::{Target, TARGETS};

#[derive(Args)]
pub struct FuzzArgs {
    /// Executions per target.
    #[arg(long, default_value_t = 1_000_000)]
    pub executions: u64,
    /// Only the targets whose names contain this.
    #[arg(long)]
    pub target: Option<String>,
    #[arg(long, default_value_t = 16)]
    pub seed: u64,
    /// Scratch directory for seeds and the parsers that read files (a tmpfs is fastest).
    #[arg(long, default_value = "/dev/shm/cellar-fuzz")]
    pub scratch: PathBuf,
    /// Where panicking inputs are saved.
    #[arg(long, default_value = "bench/work/fuzz-crashes")]
    pub crashes: PathBuf,
    #[arg(long, default_value = "bench/results/fuzz-parsers")]
    pub out: PathBuf,
}

/// Allocations above this many bytes fail while fuzzing (`usize::MAX` otherwise): a parser
/// of a 1 MiB input that asks for more is sized by a length field.
static ALLOC_CAP: AtomicUsize = AtomicUsize::new(usize::MAX);
const FUZZ_ALLOC_CAP: usize = 1 << 30;

/// The system allocator, failing requests above [`ALLOC_CAP`] (a failed allocation aborts
/// with Rust's "memory allocation of N bytes failed").
pub struct CappedAlloc;

// SAFETY: every call is System's, or a null return that GlobalAlloc allows for a failure.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on (GlobalAlloc's contract).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on (GlobalAlloc's contract).
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation here is System's).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from `System` with this layout (every allocation here is System's).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

thread_local! {
    /// Set while this thread runs a target: its panics are recorded here instead of printed.
    static CAUGHT: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that records the panics of fuzzing threads and hands every
/// other panic to the hook that was there before.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let fuzzing = CAUGHT.with(|c| {
                let mut c = c.borrow_mut();
                if let Some(slot) = c.as_mut() {
                    *slot = Some(format!("{info}"));
                    true
                } else {
                    false
                }
            });
            if !fuzzing {
                previous(info);
            }
        }));
    });
}

#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub target: String,
    pub area: String,
    pub executions: u64,
    pub accepted: u64,
    /// Refusals by error code (`corrupted`, `invalid_input`, ...).
    pub refused: BTreeMap<String, u64>,
    pub panics: u64,
    /// The first panics' messages and the files their inputs were saved to.
    pub panic_samples: Vec<(String, Option<PathBuf>)>,
    pub slowest_ms: f64,
    pub seconds: f64,
}

/// Runs `executions` mutated inputs through `target`. `crashes`: where to save the inputs that
/// panic; with it, the input being run is written before each execution (`scratch`, a tmpfs
/// by default), so that an abort leaves it behind.
pub fn run_target(
    target: &Target,
    seeds: &[Vec<u8>],
    executions: u64,
    seed: u64,
    scratch: &Path,
    crashes: Option<&Path>,
) -> Result<Outcome> {
    if seeds.is_empty() {
        return Err(CellarError::internal(format!("no seeds for fuzz target {}", target.name)));
    }
    install_panic_hook();
    let dir = scratch.join(target.name);
    std::fs::create_dir_all(&dir).at(&dir)?;
    let current = crashes.map(|_| scratch.join(format!("current-{}.bin", target.name)));
    let mut mutator = Mutator { rng: StdRng::seed_from_u64(seed) };
    let mut outcome = Outcome { target: target.name.into(), area: target.area.into(), ..Outcome::default() };
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..executions {
        let (a, b) = (mutator.rng.gen_range(0..seeds.len()), mutator.rng.gen_range(0..seeds.len()));
        let mut input = mutator.mutate(&seeds[a], &seeds[b], target.text);
        if let Some(fixup) = target.fixup.filter(|_| mutator.rng.gen_bool(0.5)) {
            fixup(&mut input);
        }
        if let Some(current) = &current {
            std::fs::write(current, &input).at(current)?;
        }
        CAUGHT.with(|c| *c.borrow_mut() = Some(None));
        ALLOC_CAP.store(FUZZ_ALLOC_CAP, Ordering::Relaxed);
        let one = Instant::now();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&dir, &input)));
        slowest = slowest.max(one.elapsed());
        ALLOC_CAP.store(usize::MAX, Ordering::Relaxed);
        let message = CAUGHT.with(|c| c.borrow_mut().take()).flatten();
        outcome.executions += 1;
        match result {
            Ok(Ok(())) => outcome.accepted += 1,
            Ok(Err(e)) => *outcome.refused.entry(e.code().to_string()).or_default() += 1,
            Err(_) => {
                outcome.panics += 1;
                if outcome.panic_samples.len() < 5 {
                    let saved = match crashes {
                        Some(c) => {
                            let path = c.join(format!("panic-{}-{}.bin", target.name, outcome.panics));
                            std::fs::write(&path, &input).at(&path)?;
                            Some(path)
                        }
                        None => None,
                    };
                    outcome.panic_samples.push((message.unwrap_or_default(), saved));
                }
            }
        }
    }
    outcome.slowest_ms = as_ms(slowest);
    outcome.seconds = started.elapsed().as_secs_f64();
    Ok(outcome)
}

#[derive(Serialize)]
struct Report {
    provenance: Provenance,
    executions_per_target: u64,
    seed: u64,
    outcomes: Vec<Outcome>,
}

pub fn run(args: FuzzArgs) -> Result<()> {
    let chosen: Vec<&Target> =
        TARGETS.iter().filter(|t| args.target.as_deref().is_none_or(|s| t.name.contains(s))).collect();
    if chosen.is_empty() {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
        return Err(CellarError::invalid(format!("no fuzz target matches; they are {}", names.join(", "))));
    }
    if args.scratch.exists() {
        std::fs::remove_dir_all(&args.scratch).at(&args.scratch)?;
    }
    std::fs::create_dir_all(&args.crashes).at(&args.crashes)?;
    let seeds = seeds::build(&args.scratch.join("seeds"))?;
    let mut outcomes = Vec::new();
    for target in chosen {
        let outcome = run_target(
            target,
            seeds.get(target.name).map(Vec::as_slice).unwrap_or_default(),
            args.executions,
            args.seed,
            &args.scratch.join("run"),
            Some(&args.crashes),
        )?;
        eprintln!(
            "{:<16} {:>9} executions  {:>9} accepted  {:>5} panics  {:>8.0}/s",
            outcome.target,
            outcome.executions,
            outcome.accepted,
            outcome.panics,
            outcome.executions as f64 / outcome.seconds
        );
        outcomes.push(outcome);
    }
    let report = Report {
        provenance: Provenance::now(),
        executions_per_target: args.executions,
        seed: args.seed,
        outcomes,
    };
    let (json, md) = write_report(&args.out, &report, &markdown(&report))?;
    eprintln!("wrote {} and {}", json.display(), md.display());
    std::fs::remove_dir_all(&args.scratch).at(&args.scratch)?;
    if report.outcomes.iter().any(|o| o.panics > 0) {
        return Err(CellarError::internal("a parser panicked: see the report's samples".to_string()));
    }
    Ok(())
}

fn markdown(report: &Report) -> String {
    let mut md = format!(
        "# Fuzzing every byte parser (structure-aware random, `cellar-bench fuzz`)\n\n{}\n\n\
         Seed {}; mutated real files, checksums recomputed on half the inputs; inputs ≤ 1 MiB, \
         allocations over 1 GiB abort.\n\n\
         | area | target | executions | accepted | refused (by code) | panics | slowest ms | exec/s |\n\
         |---|---|---:|---:|---|---:|---:|---:|\n",
        report.provenance.markdown(),
        report.seed
    );
    for o in &report.outcomes {
        let refused: Vec<String> = o.refused.iter().map(|(code, n)| format!("{code} {n}")).collect();
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.0} |\n",
            o.area,
            o.target,
            o.executions,
            o.accepted,
            refused.join(", "),
            o.panics,
            o.slowest_ms,
            o.executions as f64 / o.seconds
        ));
    }
    for o in report.outcomes.iter().filter(|o| o.panics > 0) {
        md.push_str(&format!("\n{}: {:?}\n", o.target, o.panic_samples));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short pass of issue 16.3 (the long one is `bench/fuzz-parsers.sh`): every target's
    /// seeds are real files its parser accepts, and a few thousand mutations of them are
    /// accepted or refused with a typed error, never a panic (an oversized allocation would abort
    /// this test binary).
    #[test]
    fn every_parser_survives_a_short_pass() {
        let tmp = tempfile::tempdir().unwrap();
        let seeds = seeds::build(&tmp.path().join("seeds")).unwrap();
        for target in &TARGETS {
            let own = &seeds[target.name];
            let scratch = tmp.path().join("check").join(target.name);
            std::fs::create_dir_all(&scratch).unwrap();
            for seed in own {
                (target.run)(&scratch, seed)
                    .unwrap_or_else(|e| panic!("{}: a seed is refused: {e}", target.name));
            }
            let outcome = run_target(target, own, 3_000, 163, &tmp.path().join("run"), None).unwrap();
            assert_eq!(outcome.panics, 0, "{}: {:?}", target.name, outcome.panic_samples);
            assert_eq!(outcome.executions, 3_000);
            let refused = outcome.refused.values().sum::<u64>();
            assert_eq!(refused > 0, target.refuses, "{}: mutations refused: {refused}", target.name);
        }
    }
}
