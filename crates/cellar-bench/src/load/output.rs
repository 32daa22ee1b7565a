//! Writing a finished run: PREFIX.json and PREFIX.md, the markdown on stdout, PREFIX.png, a
//! warning per failed configuration, and an error when a configuration had to be skipped.

use cellar_core::{CellarError, Result};

use super::plot;
use super::report::{Report, Status};
use super::LoadArgs;
use crate::harness::output::with_suffix;

pub fn write(args: &LoadArgs, report: &Report) -> Result<()> {
    let (json, md) = report.write(&args.out)?;
    print!("{}", report.to_markdown());
    eprintln!("cellar-bench load: wrote {} and {}", json.display(), md.display());
    let png = with_suffix(&args.out, ".png");
    plot::draw(&json, &png)?;
    eprintln!("cellar-bench load: wrote {}", png.display());
    for c in report.configurations.iter().filter(|c| c.status == Status::Failed) {
        eprintln!(
            "cellar-bench load: WARNING: {} failed: {}",
            c.spec.name,
            c.reason.as_deref().unwrap_or("?")
        );
    }
    let skipped: Vec<&str> = report
        .configurations
        .iter()
        .filter(|c| c.status == Status::Skipped)
        .map(|c| c.spec.name.as_str())
        .collect();
    if skipped.is_empty() {
        return Ok(());
    }
    Err(CellarError::Unsupported(format!(
        "configuration(s) {} were skipped (see {}): their memory cap cannot be applied here",
        skipped.join(", "),
        md.display()
    )))
}
