//! The groups of a grouped index's segment (`groups.bin`, kind 15 `segment_groups`): its records
//! are sorted by group, so each group is one run of consecutive records, and this directory says
//! where each run starts. A search of one group reads its run alone (`Index::search_group`).
//!
//! ```text
//! body  = groups u32 | group*          (groups ascending by their bytes)
//! group = start u32 | count u32 | len u16 | name (len bytes of UTF-8)
//! ```
//! The runs follow one another from record 0 and cover every record of the segment; none is
//! empty. RAM holds the directory: a few bytes per group, none per document.

use std::ops::Range;
use std::path::Path;

use cellar_core::format::fsio::{read_small_file, write_small_file};
use cellar_core::format::FileKind;
use cellar_core::{CellarError, Result};

/// One group's run of records.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    name: String,
    start: u32,
    count: u32,
}

/// A segment's groups, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Groups {
    runs: Vec<Run>,
}

impl Groups {
    /// Records one more record, of `group`: the same group as the last, or one after it.
    pub fn push(&mut self, group: &str) -> std::result::Result<(), String> {
        let records = self.records();
        match self.runs.last_mut() {
            Some(last) if last.name == group => {
                last.count += 1;
                return Ok(());
            }
            Some(last) if last.name.as_str() > group => {
                return Err(format!("group {group:?} after {:?}: records out of group order", last.name))
            }
            _ => {}
        }
        if group.len() > u16::MAX as usize {
            return Err(format!("a group of {} bytes", group.len()));
        }
        self.runs.push(Run { name: group.to_string(), start: records, count: 1 });
        Ok(())
    }

    /// Records covered.
    pub fn records(&self) -> u32 {
        self.runs.last().map_or(0, |r| r.start + r.count)
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// The records of `group` in this segment.
    pub fn run(&self, group: &str) -> Option<Range<u32>> {
        let at = self.runs.binary_search_by(|r| r.name.as_str().cmp(group)).ok()?;
        let run = &self.runs[at];
        Some(run.start..run.start + run.count)
    }

    /// The groups and their runs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Range<u32>)> {
        self.runs.iter().map(|r| (r.name.as_str(), r.start..r.start + r.count))
    }

    /// Bytes of RAM the directory holds.
    pub fn ram_bytes(&self) -> usize {
        self.runs.iter().map(|r| std::mem::size_of::<Run>() + r.name.len()).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = (self.runs.len() as u32).to_le_bytes().to_vec();
        for run in &self.runs {
            out.extend_from_slice(&run.start.to_le_bytes());
            out.extend_from_slice(&run.count.to_le_bytes());
            out.extend_from_slice(&(run.name.len() as u16).to_le_bytes());
            out.extend_from_slice(run.name.as_bytes());
        }
        out
    }

    /// Parses a body and checks it describes `docs` records; the error says what is wrong.
    pub fn decode(body: &[u8], docs: u32) -> std::result::Result<Groups, String> {
        let mut at = 0usize;
        let mut take = |n: usize| -> std::result::Result<&[u8], String> {
            let end = at.checked_add(n).filter(|e| *e <= body.len()).ok_or("cut short")?;
            let out = &body[at..end];
            at = end;
            Ok(out)
        };
        let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let n = u32_of(take(4)?);
        let mut groups = Groups::default();
        for i in 0..n {
            let (start, count) = (u32_of(take(4)?), u32_of(take(4)?));
            let len = u16::from_le_bytes(take(2)?.try_into().expect("2 bytes")) as usize;
            let name = std::str::from_utf8(take(len)?).map_err(|_| format!("group {i}: not UTF-8"))?;
            if start != groups.records() || count == 0 {
                return Err(format!(
                    "group {i} ({name:?}): records {start}+{count} do not follow the runs before"
                ));
            }
            if groups.runs.last().is_some_and(|last| last.name.as_str() >= name) {
                return Err(format!("group {i} ({name:?}): groups out of order"));
            }
            groups.runs.push(Run { name: name.to_string(), start, count });
        }
        if at != body.len() {
            return Err(format!("{} bytes after the last group", body.len() - at));
        }
        if groups.records() != docs {
            return Err(format!("the groups cover {} records of {docs}", groups.records()));
        }
        Ok(groups)
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(FileKind::SegmentGroups.file_name());
        write_small_file(&path, FileKind::SegmentGroups, &self.encode()).map(|_| ())
    }

    /// `groups.bin` of the segment in `dir`, which holds `docs` records.
    pub fn load(dir: &Path, docs: u32) -> Result<Groups> {
        let path = dir.join(FileKind::SegmentGroups.file_name());
        let (header, body) = read_small_file(&path, FileKind::SegmentGroups)?;
        Groups::decode(&body, docs).map_err(|d| CellarError::corrupted(&path, header.body_offset, d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Groups {
        let mut groups = Groups::default();
        for g in ["a", "a", "b", "user-7", "user-7", "user-7"] {
            groups.push(g).unwrap();
        }
        groups
    }

    #[test]
    fn runs_are_found_and_read_back_and_every_damage_is_refused() {
        let groups = three();
        assert_eq!(groups.run("a"), Some(0..2));
        assert_eq!(groups.run("b"), Some(2..3));
        assert_eq!(groups.run("user-7"), Some(3..6));
        assert_eq!(groups.run("c"), None);
        let body = groups.encode();
        assert_eq!(Groups::decode(&body, 6).unwrap(), groups);
        assert!(Groups::decode(&body, 7).unwrap_err().contains("cover 6 records of 7"));
        for cut in 0..body.len() {
            assert!(Groups::decode(&body[..cut], 6).is_err(), "cut at {cut}");
        }
        let mut swapped = body.clone();
        swapped[25] = b'c'; // "b" renamed "c": still ordered, accepted
        assert!(Groups::decode(&swapped, 6).is_ok());
        swapped[25] = b'a'; // "a" twice: refused
        assert!(Groups::decode(&swapped, 6).unwrap_err().contains("out of order"));
        let mut gap = body;
        gap[4..8].copy_from_slice(&1u32.to_le_bytes()); // the first run starts at 1
        assert!(Groups::decode(&gap, 6).unwrap_err().contains("do not follow"));
    }

    #[test]
    fn a_group_out_of_order_is_refused_when_written() {
        let mut groups = three();
        assert!(groups.push("b").unwrap_err().contains("out of group order"));
        groups.push("zz").unwrap();
        assert_eq!(groups.records(), 7);
    }
}
