//! The one version policy of every JSON commit point (`manifest.json`, `index.json`, `ivf.json`,
//! a stream's `stream.json` and `MANIFEST.json`): read the version field on its own, check it
//! against the range this build reads, and only then parse the whole file.
//!
//! So a file written by a newer Cellar whose other fields changed shape is
//! [`CellarError::Incompatible`] naming both versions, never `Corrupted`; a file of a readable
//! version that does not parse is `Corrupted`, at the byte where parsing stopped.

use std::fmt;
use std::path::Path;

use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer;

use crate::error::{CellarError, Result};

/// The version field of the store's `manifest.json` and of the search index's `index.json` and
/// `ivf/ivf.json` (a stream's files name theirs `version`).
pub const FORMAT_VERSION_FIELD: &str = "format_version";

/// Versions this build reads of one kind of file, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionRange {
    pub oldest: u32,
    pub newest: u32,
}

impl VersionRange {
    /// Only `version`.
    pub const fn only(version: u32) -> VersionRange {
        VersionRange { oldest: version, newest: version }
    }

    pub fn contains(self, version: u32) -> bool {
        (self.oldest..=self.newest).contains(&version)
    }

    /// `Incompatible` unless `found` is in the range.
    pub fn check(self, path: &Path, found: u32) -> Result<()> {
        if self.contains(found) {
            return Ok(());
        }
        Err(CellarError::Incompatible {
            path: path.to_path_buf(),
            found,
            oldest: self.oldest,
            newest: self.newest,
        })
    }
}

/// The top-level integer `field` of the JSON object in `bytes`, ignoring every other field
/// whatever its shape. `None` when `bytes` is not a JSON object or `field` is absent or not a u32:
/// then the full parse reports what is wrong.
fn peek_version(bytes: &[u8], field: &str) -> Option<u32> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let found = FieldSeed { field }.deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    found
}

/// The JSON file `bytes` (read from `path`) as `T`, once its version `field`, read on its own,
/// is in `range` (`Incompatible` otherwise). A file whose version cannot be read that way, or
/// that does not parse as `T`, is `Corrupted` at the byte where parsing stopped.
pub fn parse_versioned_json<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    field: &str,
    range: VersionRange,
) -> Result<T> {
    if let Some(found) = peek_version(bytes, field) {
        range.check(path, found)?;
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let offset = line_col_to_offset(bytes, e.line(), e.column());
        CellarError::corrupted(path, offset, format!("invalid {}: {e}", file_name(path)))
    })
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// Byte offset of serde_json's 1-based (line, column).
fn line_col_to_offset(bytes: &[u8], line: usize, column: usize) -> u64 {
    let line_start: usize =
        bytes.split(|b| *b == b'\n').take(line.saturating_sub(1)).map(|l| l.len() + 1).sum();
    (line_start + column.saturating_sub(1)) as u64
}

/// Deserializes a JSON object keeping only `field` (as a u32); other values are skipped unparsed
/// into any type, so their shape cannot fail the read.
struct FieldSeed<'f> {
    field: &'f str,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = Option<u32>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Option<u32>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = Option<u32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a JSON object with a `{}` field", self.field)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Option<u32>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.field && found.is_none() {
                found = map.next_value::<u32>().ok();
                if found.is_none() {
                    return Ok(None);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: VersionRange = VersionRange::only(1);

    #[test]
    fn the_version_is_read_whatever_shape_the_other_fields_have() {
        let bytes = br#"{"dim": {"now": ["an", "object"]}, "format_version": 9, "files": 3}"#;
        assert_eq!(peek_version(bytes, "format_version"), Some(9));
        assert_eq!(peek_version(br#"{"version": 2, "segments": "x"}"#, "version"), Some(2));
    }

    #[test]
    fn no_version_when_it_is_absent_mistyped_or_the_json_is_broken() {
        assert_eq!(peek_version(br#"{"dim": 3}"#, "format_version"), None);
        assert_eq!(peek_version(br#"{"format_version": "1"}"#, "format_version"), None);
        assert_eq!(peek_version(br#"{"format_version": -1}"#, "format_version"), None);
        assert_eq!(peek_version(br#"{"format_version": 1, "dim": "#, "format_version"), None);
        assert_eq!(peek_version(br#"[1, 2]"#, "format_version"), None);
        assert_eq!(peek_version(br#"{"format_version": 1} trailing"#, "format_version"), None);
    }

    #[test]
    fn a_newer_version_is_incompatible_and_names_both_versions() {
        let path = Path::new("dir/x.json");
        let err = parse_versioned_json::<serde_json::Value>(
            path,
            br#"{"format_version": 4, "dim": [1]}"#,
            "format_version",
            VersionRange { oldest: 1, newest: 2 },
        )
        .unwrap_err();
        match &err {
            CellarError::Incompatible { path: p, found: 4, oldest: 1, newest: 2 } => assert_eq!(p, path),
            other => panic!("expected Incompatible, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains("version 4") && message.contains("1..=2"), "{message}");
    }

    #[test]
    fn broken_json_of_a_readable_version_is_corrupted_where_it_breaks() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct File {
            format_version: u32,
            dim: usize,
        }
        let bytes = b"{\"format_version\": 1,\n \"dim\": \"wide\"}";
        let err = parse_versioned_json::<File>(Path::new("x.json"), bytes, "format_version", V1).unwrap_err();
        match err {
            CellarError::Corrupted { offset, detail, .. } => {
                assert!(offset > 20, "offset {offset} is on the second line");
                assert!(detail.starts_with("invalid x.json"), "{detail}");
            }
            other => panic!("expected Corrupted, got {other:?}"),
        }
        let err = parse_versioned_json::<File>(
            Path::new("x.json"),
            b"{\"format_version\": 1, ",
            "format_version",
            V1,
        )
        .unwrap_err();
        assert!(matches!(err, CellarError::Corrupted { .. }), "{err:?}");
    }
}
