//! Compaction's merge: every group of the input segments becomes one extent of the output, its
//! entries merged by id (each input extent is sorted by id) with the newest sequence number
//! winning. The inputs are all of the collection's oldest segments, so nothing older can hide
//! under a tombstone: shadowed versions and tombstones are dropped. Memory is bounded by one read
//! chunk per input, whatever the group's size.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use cellar_core::Result;

use crate::doc::EntryView;
use crate::segment::{ExtentCursor, Segment, SegmentWriter, CHUNK_BYTES};

/// One input's next entry, owned, with its id and seq parsed.
struct Head {
    entry: Vec<u8>,
    id: String,
    seq: u64,
    tombstone: bool,
}

fn advance(cursor: &mut ExtentCursor<'_>) -> Result<Option<Head>> {
    let path = cursor.path();
    let Some(entry) = cursor.next_entry()? else { return Ok(None) };
    let view = EntryView::parse_at(path, entry)?;
    let head = Head {
        id: view.id.to_string(),
        seq: view.seq,
        tombstone: view.is_tombstone(),
        entry: entry.to_vec(),
    };
    Ok(Some(head))
}

/// Writes the merge of `inputs` to `path` and opens it.
pub fn merge_segments(inputs: &[Arc<Segment>], path: &Path, dim: usize) -> Result<Segment> {
    let groups: BTreeSet<&str> = inputs.iter().flat_map(|s| s.groups()).collect();
    let mut out = SegmentWriter::create(path, dim)?;
    for group in groups {
        out.begin_group(group)?;
        merge_group(inputs, group, &mut out)?;
    }
    out.finish()
}

fn merge_group(inputs: &[Arc<Segment>], group: &str, out: &mut SegmentWriter) -> Result<()> {
    let chunk = CHUNK_BYTES / inputs.len().max(1);
    let mut cursors: Vec<ExtentCursor<'_>> = inputs.iter().filter_map(|s| s.cursor(group, chunk)).collect();
    let mut heads = cursors.iter_mut().map(advance).collect::<Result<Vec<_>>>()?;
    loop {
        let Some(smallest) = heads.iter().flatten().map(|h| h.id.as_str()).min().map(str::to_string) else {
            return Ok(());
        };
        let mut winner: Option<Head> = None;
        for (head, cursor) in heads.iter_mut().zip(cursors.iter_mut()) {
            if head.as_ref().is_some_and(|h| h.id == smallest) {
                let taken = std::mem::replace(head, advance(cursor)?).expect("checked");
                if winner.as_ref().is_none_or(|w| taken.seq > w.seq) {
                    winner = Some(taken);
                }
            }
        }
        let winner = winner.expect("at least one input holds the smallest id");
        if !winner.tombstone {
            out.push(&winner.entry, winner.seq)?;
        }
    }
}
