//! The exit codes of `cellar`, declared once: [`Exit::of`] maps every [`CellarError`] variant
//! (exhaustively: a new variant does not compile until it has a code), `main` exits with it,
//! `cellar --help` ends with [`help`], and docs/cli.md shows the same table (a test holds the
//! two together).
//!
//! Code 2 is what every error exited with before, and what scripts and tests rely on for a
//! command that cannot run as given: bad arguments or input, and also a missing or damaged file,
//! a directory open elsewhere and a failed read or write. The other codes name the errors whose
//! fix is of another kind: another build, a model, another platform feature, a bug report.

use cellar_core::CellarError;

/// What a failed command's exit status says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The command cannot run as given (also clap's usage errors).
    Input,
    /// A file of a format version this build does not read.
    Incompatible,
    /// The model is missing or unusable.
    Model,
    /// The platform refuses a capability that was asked for.
    Unsupported,
    /// A broken invariant: a bug.
    Internal,
}

impl Exit {
    /// Every failure code, in the order of the table.
    pub const ALL: [Exit; 5] =
        [Exit::Input, Exit::Incompatible, Exit::Model, Exit::Unsupported, Exit::Internal];

    /// The exit status.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Input => 2,
            Exit::Incompatible => 3,
            Exit::Model => 4,
            Exit::Unsupported => 5,
            Exit::Internal => 6,
        }
    }

    /// What it means, as `--help` and docs/cli.md show it.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Input => {
                "the command cannot run as given: bad arguments (usage), invalid input, a wrong vector \
                 dimension, an unknown id or name, a missing or damaged file, an index or collection open \
                 elsewhere, a failed read or write (a full disk included)"
            }
            Exit::Incompatible => {
                "a file of a format version this build does not read: use the cellar that wrote it, or rebuild"
            }
            Exit::Model => "the model is missing or unusable: install it, or pass --model",
            Exit::Unsupported => {
                "the platform refuses a capability that was asked for (O_DIRECT, io_uring): pick another reader"
            }
            Exit::Internal => "an internal error (a broken invariant): a bug, please report it",
        }
    }

    /// The code of `error`.
    pub fn of(error: &CellarError) -> Exit {
        match error {
            CellarError::InvalidInput(_)
            | CellarError::WrongDimension { .. }
            | CellarError::DocOutOfRange { .. }
            | CellarError::NotFound(_)
            | CellarError::Corrupted { .. }
            | CellarError::Locked { .. }
            | CellarError::Io { .. } => Exit::Input,
            CellarError::Incompatible { .. } => Exit::Incompatible,
            CellarError::Model { .. } => Exit::Model,
            CellarError::Unsupported(_) => Exit::Unsupported,
            CellarError::Internal(_) => Exit::Internal,
        }
    }
}

/// The table `cellar --help` ends with: `0` and every [`Exit`], one per line.
pub fn help() -> String {
    let mut text = String::from("Exit codes:\n  0  success");
    for exit in Exit::ALL {
        text.push_str(&format!("\n  {}  {}", exit.code(), exit.meaning()));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn every_error_kind_has_its_code_and_the_codes_are_distinct() {
        let path = PathBuf::from("x");
        let cases = [
            (CellarError::invalid("bad"), 2),
            (CellarError::WrongDimension { expected: 2, received: 3 }, 2),
            (CellarError::DocOutOfRange { id: 9, count: 1 }, 2),
            (CellarError::NotFound("doc".into()), 2),
            (CellarError::corrupted(&path, 4, "bad crc"), 2),
            (CellarError::Locked { path: path.clone(), detail: "held".into() }, 2),
            (CellarError::io(&path, std::io::Error::from_raw_os_error(libc::ENOSPC)), 2),
            (CellarError::Incompatible { path: path.clone(), found: 9, oldest: 1, newest: 2 }, 3),
            (CellarError::Model { path, detail: "no config.json".into() }, 4),
            (CellarError::Unsupported("O_DIRECT".into()), 5),
            (CellarError::internal("a vanished thread"), 6),
        ];
        for (error, code) in cases {
            assert_eq!(Exit::of(&error).code(), code, "{error}");
        }
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len(), "two kinds share a code");
        assert!(!codes.contains(&0) && !codes.contains(&101), "success and a panic keep theirs: {codes:?}");
    }
}
