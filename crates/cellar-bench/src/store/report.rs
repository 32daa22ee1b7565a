//! The store benchmark's report: one row per reader run, fio's rows; JSON and markdown.

use std::fmt::Write as _;
use std::path::Path;

use cellar_core::format::Manifest;
use cellar_core::io::ReaderKind;
use cellar_core::Result;
use serde::Serialize;

use super::fio::FioResult;
use super::worker::WorkerReport;
use super::StoreArgs;
use crate::harness::cgroup::CgroupUsage;
use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::harness::stats::percentile;

const MIB: f64 = (1u64 << 20) as f64;

#[derive(Serialize)]
pub struct ReaderRow {
    pub reader: String,
    pub engine: String,
    pub capped: bool,
    pub error: Option<String>,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    pub iops_4k: f64,
    pub read_calls_per_s: f64,
    pub batch_p50_ms: f64,
    pub batch_p99_ms: f64,
    pub open_s: f64,
    pub peak_rss_mib: f64,
    pub cgroup_peak_mib: Option<f64>,
    pub cgroup_failcnt: Option<u64>,
}

impl ReaderRow {
    pub fn measured(w: WorkerReport, capped: bool, cgroup: Option<CgroupUsage>) -> Self {
        let mut ms = w.batch_ms.clone();
        ms.sort_by(f64::total_cmp);
        ReaderRow {
            reader: w.reader,
            engine: w.engine,
            capped,
            error: None,
            records_per_s: w.records as f64 / w.wall_s,
            mb_per_s: w.bytes as f64 / 1e6 / w.wall_s,
            iops_4k: w.pages as f64 / w.wall_s,
            read_calls_per_s: w.read_calls as f64 / w.wall_s,
            batch_p50_ms: percentile(&ms, 50.0).unwrap_or(f64::NAN),
            batch_p99_ms: percentile(&ms, 99.0).unwrap_or(f64::NAN),
            open_s: w.open_s,
            peak_rss_mib: w.peak_rss_bytes as f64 / MIB,
            cgroup_peak_mib: cgroup.map(|u| u.peak_bytes as f64 / MIB),
            cgroup_failcnt: cgroup.map(|u| u.fail_count),
        }
    }

    pub fn failed(reader: ReaderKind, capped: bool, error: String) -> Self {
        ReaderRow {
            reader: reader.name().into(),
            engine: "-".into(),
            capped,
            error: Some(error),
            records_per_s: f64::NAN,
            mb_per_s: f64::NAN,
            iops_4k: f64::NAN,
            read_calls_per_s: f64::NAN,
            batch_p50_ms: f64::NAN,
            batch_p99_ms: f64::NAN,
            open_s: f64::NAN,
            peak_rss_mib: f64::NAN,
            cgroup_peak_mib: None,
            cgroup_failcnt: None,
        }
    }
}

#[derive(Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub provenance: Provenance,
    pub disk_note: String,
    pub store: String,
    pub docs: u64,
    pub tokens: u64,
    pub dim: usize,
    pub codec: String,
    pub store_mib: f64,
    pub offsets_ram_mib: f64,
    pub cap_mib: f64,
    pub batch_size: usize,
    pub batches: usize,
    pub threads: usize,
    pub build: Option<super::BuildRow>,
    pub fio: Vec<std::result::Result<FioResult, String>>,
    pub readers: Vec<ReaderRow>,
}

impl Report {
    pub fn new(args: &StoreArgs, m: &Manifest, store_bytes: u64, cap_bytes: u64) -> Self {
        Report {
            provenance: Provenance::now(),
            disk_note: "virtual disk, host-cached: latencies are far below a real SSD's".into(),
            store: args.store.display().to_string(),
            docs: m.counts.docs,
            tokens: m.counts.tokens,
            dim: m.dim,
            codec: m.codec.name().into(),
            store_mib: store_bytes as f64 / MIB,
            offsets_ram_mib: (m.counts.docs * 16) as f64 / MIB,
            cap_mib: cap_bytes as f64 / MIB,
            batch_size: args.batch_size,
            batches: args.batches,
            threads: args.threads,
            build: None,
            fio: Vec::new(),
            readers: Vec::new(),
        }
    }

    pub fn add_fio(&mut self, result: std::result::Result<FioResult, String>) {
        self.fio.push(result);
    }

    pub fn write(&self, prefix: &Path) -> Result<()> {
        let markdown = self.markdown();
        let (json_path, md_path) = write_report(prefix, self, &markdown)?;
        println!("{markdown}");
        eprintln!("cellar-bench store: wrote {} and {}", json_path.display(), md_path.display());
        Ok(())
    }

    fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# cellar-bench store\n\n{}", self.provenance.markdown());
        let _ = writeln!(
            s,
            "Store: {} docs, {} tokens, dim {}, {}; {:.0} MiB on disk, offsets table {:.2} MiB in RAM. \
             Batches: {} x {} random records, {} stream(s). Memory cap: {:.0} MiB (memory cgroup, page cache counted). \
             Page cache evicted before each run. Disk: {}.\n",
            self.docs, self.tokens, self.dim, self.codec, self.store_mib, self.offsets_ram_mib, self.batches,
            self.batch_size, self.threads, self.cap_mib, self.disk_note
        );
        if let Some(b) = &self.build {
            self.build_line(b, &mut s);
        }
        self.readers_table(&mut s);
        self.fio_table(&mut s);
        let _ = writeln!(s, "\nMaxSim kernel timings: `cargo bench -p cellar-core --bench kernels`.");
        s
    }

    fn build_line(&self, b: &super::BuildRow, s: &mut String) {
        let _ = match (b.cap_mib, &b.uncapped_because) {
            (Some(cap), _) => writeln!(
                s,
                "Built by `cellar-bench synth` in {:.0} s inside a {cap:.0} MiB memory cap (cgroup peak {} MiB): \
                 the writer streams, so a store {:.0}x larger than its memory limit builds.\n",
                b.seconds,
                b.cgroup_peak_mib.map_or("-".into(), |p| format!("{p:.0}")),
                self.store_mib / cap
            ),
            (None, why) => writeln!(
                s,
                "Built by `cellar-bench synth` in {:.0} s without a memory cap ({}).\n",
                b.seconds,
                why.as_deref().unwrap_or("no cap requested")
            ),
        };
    }

    fn readers_table(&self, s: &mut String) {
        let ram_rate = self.readers.iter().find(|r| r.reader == "ram" && !r.capped).map(|r| r.records_per_s);
        let _ = writeln!(s, "| reader | engine | memory cap | records/s | slower than ram | MB/s served | 4K IOPS | reads/s | P50 batch ms | P99 batch ms | peak RSS MiB | cgroup peak MiB |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.readers {
            let cap = if r.capped { format!("{:.0} MiB", self.cap_mib) } else { "none".into() };
            if let Some(e) = &r.error {
                let _ = writeln!(s, "| {} | - | {cap} | not measured: {e} |||||||||", r.reader);
                continue;
            }
            let vs = ram_rate.map_or("-".into(), |ram| format!("{:.0}x", ram / r.records_per_s));
            let cg = r.cgroup_peak_mib.map_or("-".into(), |m| format!("{m:.0}"));
            let _ = writeln!(
                s,
                "| {} | {} | {cap} | {:.0} | {vs} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {cg} |",
                r.reader,
                r.engine,
                r.records_per_s,
                r.mb_per_s,
                r.iops_4k,
                r.read_calls_per_s,
                r.batch_p50_ms,
                r.batch_p99_ms,
                r.peak_rss_mib
            );
        }
        let _ = writeln!(
            s,
            "\nMB/s served: bytes of the records' pages per second (mmap, direct: read from the file; ram: \
             handed out without copying). mmap and direct check each record's CRC-32C on every read; ram \
             checks the whole body once at open. reads/s: io_uring reads (direct) or MADV_WILLNEED calls (mmap)."
        );
    }

    fn fio_table(&self, s: &mut String) {
        if self.fio.is_empty() {
            let _ = writeln!(s, "\nDisk limits: fio not run (--fio-seconds 0).");
            return;
        }
        let _ = writeln!(
            s,
            "\n| disk limit (fio, same file) | IOPS | MB/s | P50 us | P99 us |\n|---|---|---|---|---|"
        );
        for f in &self.fio {
            let _ = match f {
                Ok(f) => writeln!(
                    s,
                    "| {} | {:.0} | {:.0} | {:.0} | {:.0} |",
                    f.job, f.iops, f.mb_per_s, f.p50_us, f.p99_us
                ),
                Err(e) => writeln!(s, "| not measured: {e} |||||"),
            };
        }
    }
}
