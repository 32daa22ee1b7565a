//! `cellar inspect`: an index's (or a bare vector store's) manifest, file headers and RAM/disk
//! footprint, without reading vectors; `--verify` reads every file against its checksums and
//! prints one line per file checked, the first damage being the error (exit 2, naming the file
//! and the offset).

use std::path::{Path, PathBuf};

use cellar_core::format::fsio::open_checked;
use cellar_core::format::offsets::ENTRY_BYTES;
use cellar_core::format::{FileKind, Manifest};
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::store::VectorStore;
use cellar_core::Result;
use cellar_search::index::VECTORS_DIR;
use cellar_search::ivf::{IVF_DIR, IVF_KINDS};
use cellar_search::verify::Checked;
use cellar_search::{lock, Index, OpenOptions};

#[derive(clap::Args)]
pub struct InspectArgs {
    /// Index directory (the one `cellar index --out` wrote), or a bare vector store (such as an
    /// index's `vectors/`).
    pub index: PathBuf,
    /// Also read every file against its checksums: records, bodies, the IVF's blocks and
    /// vectors, BM25's files (reads the whole index).
    #[arg(long)]
    pub verify: bool,
}

pub fn run(args: InspectArgs) -> Result<()> {
    if lock::is_index_dir(&args.index) {
        return inspect_index(&args.index, args.verify);
    }
    let footprint = print_store(&args.index)?;
    println!("\n{footprint}");
    if args.verify {
        let store = VectorStore::open(&args.index, &ReaderOptions::new(ReaderKind::Mmap))?;
        let records = store.verify()?;
        print_checked(&Checked {
            file: FileKind::Vectors.file_name().into(),
            what: format!("{records} records against their checksums, body checksum ok"),
        });
    }
    Ok(())
}

/// An index directory: opened (under its shared lock, every part checked against the others),
/// then its store and its own files' headers; with `verify`, every file read.
fn inspect_index(dir: &Path, verify: bool) -> Result<()> {
    let index = Index::open(dir, OpenOptions { reader: ReaderKind::Mmap, ..Default::default() })?;
    let config = index.config();
    println!("index      {}", dir.display());
    println!(
        "built by   {} from {} documents; model {} ({}-d), codec {}, pca {}",
        config.created_by,
        config.build.docs,
        config.encoder.model,
        config.encoder.model_dim,
        config.codec,
        config.pca_dim.map_or("none".to_string(), |d| format!("to {d}")),
    );
    match index.ivf_config() {
        Some(ivf) => println!("ivf        {} clusters, default nprobe {}", ivf.clusters, ivf.search.nprobe),
        None => println!("ivf        none"),
    }
    match index.tokens_config() {
        Some(t) => println!(
            "tokens     {} leaves over {} tokens, default nprobe {}, impute {}, dense depth {}",
            t.leaves,
            t.tokens,
            t.search.nprobe,
            t.impute(),
            t.depth()
        ),
        None => println!("tokens     none"),
    }
    println!();
    let footprint = print_store(&dir.join(VECTORS_DIR))?;
    let mut own: Vec<(PathBuf, FileKind)> = [FileKind::Pooled, FileKind::Texts, FileKind::TextOffsets]
        .into_iter()
        .map(|k| (PathBuf::from(k.file_name()), k))
        .collect();
    if index.ivf_config().is_some() {
        own.extend(IVF_KINDS.map(|k| (Path::new(IVF_DIR).join(k.file_name()), k)));
    }
    for (file, kind) in own {
        let (_, header) = open_checked(&dir.join(&file), kind)?;
        print_header(&file.display().to_string(), kind, &header);
    }
    println!("\n{footprint} (the store in {VECTORS_DIR}/)");
    if verify {
        println!();
        index.verify(print_checked)?;
    }
    Ok(())
}

fn print_checked(checked: &Checked) {
    println!("verify     {:<28} ok: {}", checked.file.display(), checked.what);
}

/// The store in `dir`: its manifest and the headers of its files. Returns its footprint line.
fn print_store(dir: &Path) -> Result<String> {
    let manifest = Manifest::read(dir)?;
    println!("store      {}", dir.display());
    println!("format     v{} ({})", manifest.format_version, manifest.created_by);
    println!(
        "vectors    dim {}, codec {}, {} bytes/token, pooled: {}",
        manifest.dim,
        manifest.codec.name(),
        manifest.bytes_per_token,
        manifest.has_pooled
    );
    let c = &manifest.counts;
    println!(
        "counts     {} docs, {} tokens ({:.1} tokens/doc), {} pages of {} bytes",
        c.docs,
        c.tokens,
        c.tokens as f64 / c.docs.max(1) as f64,
        c.pages,
        manifest.page_bytes
    );
    println!(
        "\n{:<24} {:<13} {:>4} {:>11} {:>15} {:>10}",
        "file", "kind", "ver", "body_offset", "body_len", "body_crc"
    );
    let mut disk_bytes = 0u64;
    for kind in FileKind::STORE {
        let (_, header) = open_checked(&dir.join(kind.file_name()), kind)?;
        disk_bytes += header.body_offset + header.body_len;
        print_header(kind.file_name(), kind, &header);
    }
    let ram = c.docs * ENTRY_BYTES as u64;
    Ok(format!(
        "footprint  {:.1} MiB on disk; {:.2} MiB in RAM for the offsets table ({}x smaller)",
        disk_bytes as f64 / (1 << 20) as f64,
        ram as f64 / (1 << 20) as f64,
        disk_bytes / ram.max(1)
    ))
}

fn print_header(file: &str, kind: FileKind, h: &cellar_core::format::FileHeader) {
    println!(
        "{:<24} {:<13} {:>4} {:>11} {:>15} {:>10}",
        file,
        kind.name(),
        h.format_version,
        h.body_offset,
        h.body_len,
        format!("{:08x}", h.body_crc32c)
    );
}
