//! `cellar inspect`: manifest, file headers and the RAM/disk footprint, without reading vectors.

use std::path::PathBuf;

use cellar_core::format::fsio::open_checked;
use cellar_core::format::offsets::ENTRY_BYTES;
use cellar_core::format::{FileKind, Manifest};
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::store::VectorStore;
use cellar_core::Result;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// Index directory.
    pub index: PathBuf,
    /// Also stream vectors.bin through its checksum (reads the whole file).
    #[arg(long)]
    pub verify: bool,
}

pub fn run(args: InspectArgs) -> Result<()> {
    let manifest = Manifest::read(&args.index)?;
    println!("index      {}", args.index.display());
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
        "\n{:<12} {:<13} {:>4} {:>11} {:>15} {:>10}",
        "file", "kind", "ver", "body_offset", "body_len", "body_crc"
    );
    let mut disk_bytes = 0u64;
    for kind in FileKind::STORE {
        let path = args.index.join(kind.file_name());
        let (_, h) = open_checked(&path, kind)?;
        disk_bytes += h.body_offset + h.body_len;
        println!(
            "{:<12} {:<13} {:>4} {:>11} {:>15} {:>10}",
            kind.file_name(),
            kind.name(),
            h.format_version,
            h.body_offset,
            h.body_len,
            format!("{:08x}", h.body_crc32c)
        );
    }
    let ram = c.docs * ENTRY_BYTES as u64;
    println!(
        "\nfootprint  {:.1} MiB on disk; {:.2} MiB in RAM for the offsets table ({}x smaller)",
        disk_bytes as f64 / (1 << 20) as f64,
        ram as f64 / (1 << 20) as f64,
        disk_bytes / ram.max(1)
    );
    if args.verify {
        let store = VectorStore::open(&args.index, &ReaderOptions::new(ReaderKind::Mmap))?;
        store.verify()?;
        println!("verify     vectors.bin body checksum ok");
    }
    Ok(())
}
