//! The in-memory buffer: the newest entry of every (group, id) written since the last flush, as
//! encoded entry bytes (the same bytes the log and the segments hold), sorted by group then id.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes a memtable slot costs beyond its entry bytes (keys' headers, tree nodes, `Arc`).
const SLOT_OVERHEAD: usize = 96;

#[derive(Default)]
pub struct Memtable {
    groups: BTreeMap<String, BTreeMap<String, Arc<[u8]>>>,
    bytes: usize,
    entries: usize,
}

impl Memtable {
    /// Keeps `entry` as the newest version of (group, id); the caller hands entries in
    /// sequence order.
    pub fn insert(&mut self, group: &str, id: &str, entry: Arc<[u8]>) {
        let added = entry.len();
        let docs = self.groups.entry(group.to_string()).or_default();
        match docs.insert(id.to_string(), entry) {
            Some(old) => self.bytes -= old.len(),
            None => {
                self.entries += 1;
                self.bytes += SLOT_OVERHEAD + group.len() + id.len();
            }
        }
        self.bytes += added;
    }

    pub fn get(&self, group: &str, id: &str) -> Option<Arc<[u8]>> {
        self.groups.get(group)?.get(id).cloned()
    }

    /// The group's entries (tombstones included), sorted by id.
    pub fn group(&self, group: &str) -> Vec<Arc<[u8]>> {
        self.groups.get(group).map_or_else(Vec::new, |docs| docs.values().cloned().collect())
    }

    pub fn has_group(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Every group with its entries, sorted: what a flush writes.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Vec<&[u8]>)> {
        self.groups.iter().map(|(g, docs)| (g.as_str(), docs.values().map(|e| &e[..]).collect()))
    }

    /// Approximate heap bytes held (entries plus a fixed overhead per slot).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
}
