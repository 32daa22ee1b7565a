//! The progress bar of long front-end commands (the `cellar` CLI, the `cellar-bench` harnesses):
//! drawn on stderr, hidden when it is not a terminal. Declared here, where both front ends and
//! `eval::prepare_all` (which takes one) already meet.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `total` steps labelled `what`.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
