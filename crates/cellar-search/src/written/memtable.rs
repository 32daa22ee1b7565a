//! The memtable of a live view: the written, logged documents not yet in a segment, in
//! ascending ids, with their positions by group (a grouped index) and by IVF cluster.
//!
//! Every write makes a new view from the newest one, so copying the memtable must not cost its
//! size. It is a list of chunks of [`CHUNK_DOCS`] documents, each chunk shared between the views
//! that hold it: a copy of the memtable copies the list of chunk handles, and a write's first
//! push copies only the last chunk, if another view holds it. A chunk keeps its own positions by
//! group and by cluster, so neither is copied whole either: a search asks each chunk.
//!
//! Once a flush has put its oldest documents in a segment, the view after it drops them
//! (`without_first`): whole chunks go, and the first chunk left may begin with documents that are
//! no longer the memtable's (`skip`), so the positions of the others need not move.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use cellar_core::DocId;

use crate::written::batch::LiveDoc;

/// Documents per chunk: what a write copies at most when another view holds the last chunk.
pub(crate) const CHUNK_DOCS: usize = 256;

/// Written documents not yet in a segment, shared chunk by chunk between views.
#[derive(Clone, Default)]
pub(crate) struct Memtable {
    chunks: Vec<Arc<Chunk>>,
    /// Documents at the start of the first chunk that are no longer the memtable's.
    skip: usize,
    len: usize,
}

#[derive(Clone, Default)]
struct Chunk {
    docs: Vec<Arc<LiveDoc>>,
    /// Hash of a group (`group_hash`) → positions in `docs` of its documents; two groups of
    /// one hash share a list, so a reader checks each document's group.
    groups: HashMap<u64, Vec<u16>>,
    /// IVF cluster → positions in `docs`.
    clusters: HashMap<u32, Vec<u16>>,
}

/// The key a chunk files a group under.
fn group_hash(group: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    group.hash(&mut hasher);
    hasher.finish()
}

impl Memtable {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The document at position `i` (0 is the oldest).
    pub(crate) fn get(&self, i: usize) -> Option<&Arc<LiveDoc>> {
        if i >= self.len {
            return None;
        }
        let at = i + self.skip;
        self.chunks.get(at / CHUNK_DOCS)?.docs.get(at % CHUNK_DOCS)
    }

    /// The internal id of the oldest document.
    pub(crate) fn first_id(&self) -> Option<DocId> {
        self.get(0).map(|d| d.id)
    }

    /// Every document, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<LiveDoc>> {
        self.chunks.iter().flat_map(|c| c.docs.iter()).skip(self.skip)
    }

    /// The memtable without its `n` oldest documents (a flush put them in a segment); the
    /// chunks it keeps stay shared with this one.
    pub(crate) fn without_first(&self, n: usize) -> Memtable {
        assert!(n <= self.len, "dropping {n} of {} memtable documents", self.len);
        if n == self.len {
            return Memtable::default();
        }
        let at = self.skip + n;
        Memtable { chunks: self.chunks[at / CHUNK_DOCS..].to_vec(), skip: at % CHUNK_DOCS, len: self.len - n }
    }

    /// Appends `doc` (the next id), filed under `cluster` when the index has an IVF.
    pub(crate) fn push(&mut self, doc: Arc<LiveDoc>, cluster: Option<u32>) {
        if self.chunks.last().is_none_or(|c| c.docs.len() == CHUNK_DOCS) {
            self.chunks.push(Arc::new(Chunk::default()));
        }
        let chunk = Arc::make_mut(self.chunks.last_mut().expect("a chunk with room"));
        let at = chunk.docs.len() as u16;
        if let Some(cluster) = cluster {
            chunk.clusters.entry(cluster).or_default().push(at);
        }
        if let Some(group) = &doc.doc.group {
            chunk.groups.entry(group_hash(group)).or_default().push(at);
        }
        chunk.docs.push(doc);
        self.len += 1;
    }

    /// Positions of the documents of `group`, ascending.
    pub(crate) fn in_group<'a>(&'a self, group: &'a str) -> impl Iterator<Item = usize> + 'a {
        let key = group_hash(group);
        self.chunks.iter().enumerate().flat_map(move |(c, chunk)| {
            let at = chunk.groups.get(&key).map_or(&[][..], Vec::as_slice);
            at.iter()
                .map(move |p| c * CHUNK_DOCS + usize::from(*p))
                .filter(move |at| *at >= self.skip)
                .filter(move |at| chunk.docs[at % CHUNK_DOCS].doc.group.as_deref() == Some(group))
                .map(move |at| at - self.skip)
        })
    }

    /// The documents filed under IVF cluster `cluster`.
    pub(crate) fn in_cluster(&self, cluster: u32) -> impl Iterator<Item = &Arc<LiveDoc>> + '_ {
        self.chunks.iter().enumerate().flat_map(move |(c, chunk)| {
            let at = chunk.clusters.get(&cluster).map_or(&[][..], Vec::as_slice);
            let first = if c == 0 { self.skip } else { 0 };
            at.iter().filter(move |p| usize::from(**p) >= first).map(move |p| &chunk.docs[usize::from(*p)])
        })
    }
}

impl std::ops::Index<usize> for Memtable {
    type Output = Arc<LiveDoc>;

    fn index(&self, i: usize) -> &Arc<LiveDoc> {
        self.get(i).expect("a memtable position")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::Document;

    fn doc(id: u32, group: &str) -> Arc<LiveDoc> {
        Arc::new(LiveDoc {
            id: DocId(id),
            doc: Document { group: Some(group.into()), ..Document::new(format!("d{id}"), "", "") },
            n_tokens: 1,
            tokens: vec![0; 4],
            pooled: vec![0; 4],
        })
    }

    #[test]
    fn a_copy_shares_chunks_and_a_push_changes_only_its_own_memtable() {
        let mut a = Memtable::default();
        let n = CHUNK_DOCS * 2 + 7;
        for i in 0..n as u32 {
            a.push(doc(i, ["x", "y", "z"][i as usize % 3]), Some(i % 5));
        }
        let b = a.clone();
        a.push(doc(n as u32, "x"), Some(0));
        assert_eq!((a.len(), b.len()), (n + 1, n));
        assert!(b.get(n).is_none());
        assert_eq!(a[n].id, DocId(n as u32));
        // Full chunks stay shared; the last one was copied for `a`'s push.
        assert!(Arc::ptr_eq(&a.chunks[0], &b.chunks[0]));
        assert!(!Arc::ptr_eq(&a.chunks[2], &b.chunks[2]));
        assert_eq!(a.iter().map(|d| d.id.0).collect::<Vec<_>>(), (0..=n as u32).collect::<Vec<_>>());
        let xs: Vec<usize> = a.in_group("x").collect();
        let expected: Vec<usize> = (0..=n).filter(|i| *i == n || i % 3 == 0).collect();
        assert_eq!(xs, expected);
        assert_eq!(b.in_group("x").count(), expected.len() - 1);
        assert_eq!(a.in_group("w").count(), 0);
        let zeros: Vec<u32> = a.in_cluster(0).map(|d| d.id.0).collect();
        let expected: Vec<u32> = (0..=n as u32).filter(|i| *i == n as u32 || i % 5 == 0).collect();
        assert_eq!(zeros, expected);
        assert_eq!(a.first_id(), Some(DocId(0)));
    }

    /// Dropping the oldest documents (a flush's) at every offset inside a chunk and across
    /// chunks answers every question as a memtable of the rest alone would.
    #[test]
    fn without_its_oldest_documents_a_memtable_answers_as_one_of_the_rest() {
        let n = CHUNK_DOCS * 3 + 5;
        let group = |i: u32| ["x", "y", "z"][i as usize % 3];
        let mut all = Memtable::default();
        for i in 0..n as u32 {
            all.push(doc(i, group(i)), Some(i % 7));
        }
        for drop in [0, 1, 17, CHUNK_DOCS - 1, CHUNK_DOCS, CHUNK_DOCS + 3, 2 * CHUNK_DOCS, n - 1, n] {
            let mut rest = Memtable::default();
            for i in drop as u32..n as u32 {
                rest.push(doc(i, group(i)), Some(i % 7));
            }
            // Twice, in two steps, as two flushes in a row would.
            let half = drop / 2;
            for kept in [all.without_first(drop), all.without_first(half).without_first(drop - half)] {
                let ids = |m: &Memtable| m.iter().map(|d| d.id.0).collect::<Vec<_>>();
                assert_eq!((kept.len(), ids(&kept)), (rest.len(), ids(&rest)), "dropped {drop}");
                assert_eq!(kept.first_id(), rest.first_id());
                for i in [0, 1, rest.len().saturating_sub(1), rest.len()] {
                    assert_eq!(
                        kept.get(i).map(|d| d.id),
                        rest.get(i).map(|d| d.id),
                        "dropped {drop}, at {i}"
                    );
                }
                for g in ["x", "y", "z"] {
                    assert_eq!(kept.in_group(g).collect::<Vec<_>>(), rest.in_group(g).collect::<Vec<_>>());
                }
                for c in 0..7 {
                    let of = |m: &Memtable| m.in_cluster(c).map(|d| d.id.0).collect::<Vec<_>>();
                    assert_eq!(of(&kept), of(&rest), "dropped {drop}, cluster {c}");
                }
                // Pushed onto after the drop, as the next write does.
                let (mut kept, mut rest) = (kept, rest.clone());
                kept.push(doc(n as u32, "x"), Some(0));
                rest.push(doc(n as u32, "x"), Some(0));
                assert_eq!(kept.in_group("x").collect::<Vec<_>>(), rest.in_group("x").collect::<Vec<_>>());
                assert_eq!(kept.get(kept.len() - 1).map(|d| d.id.0), Some(n as u32));
            }
        }
    }
}
