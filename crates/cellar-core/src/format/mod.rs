//! Bytes on disk: the common file header, the file kinds, the manifest, the vector store's
//! record and offsets layouts (shared by its writer and every reader), and atomic writes.
//!
//! An index is a directory holding `manifest.json` plus immutable binary files. Every binary file
//! starts with a 64-byte [`FileHeader`](header::FileHeader) (magic, format version, kind, body
//! offset, body length, body checksum, header checksum). The manifest is written last: a directory
//! without one is an interrupted build, never a half-readable index. The layouts are drawn in
//! `docs/format/`, and a test checks those drawings against the constants here.

pub mod fsio;
pub mod header;
pub mod manifest;
pub mod offsets;
#[doc(hidden)]
pub mod parsers;
pub mod record;
pub mod versioned;
pub mod wal;

pub use header::{FileHeader, HEADER_BYTES};
pub use manifest::{FileEntry, Manifest};
pub use versioned::VersionRange;

/// The format version this build writes.
pub const FORMAT_VERSION: u32 = 1;
/// The oldest format version this build still reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;
/// The versions of the vector store (headers and `manifest.json`) this build reads.
pub const READABLE_VERSIONS: VersionRange =
    VersionRange { oldest: OLDEST_READABLE_VERSION, newest: FORMAT_VERSION };
/// The version `text_offsets.bin` is written in: 2 added a CRC-32C per text record (version 1,
/// offsets alone, is still read).
pub const TEXT_OFFSETS_VERSION: u32 = 2;
/// The versions of `text_offsets.bin` this build reads.
pub const TEXT_OFFSETS_READABLE_VERSIONS: VersionRange =
    VersionRange { oldest: 1, newest: TEXT_OFFSETS_VERSION };
/// Page size of the vector store: records never straddle a page unless they are larger than one.
pub const PAGE_BYTES: usize = 4096;

/// Every kind of binary file in an index directory. The numeric value is stored in the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FileKind {
    /// Token-vector records packed in 4 KiB pages (`vectors.bin`).
    Vectors = 1,
    /// Per-document (offset, length, checksum) table (`offsets.bin`).
    Offsets = 2,
    /// Parameters of the vector codec, e.g. int8 per-dimension scales (`codec.bin`).
    CodecParams = 3,
    /// One pooled (single-vector) embedding per document, f16 (`pooled.bin`).
    Pooled = 4,
    /// Documents' display text, one JSON line each (`texts.bin`).
    Texts = 5,
    /// Byte offset of every document's line in `texts.bin` (`text_offsets.bin`).
    TextOffsets = 6,
    /// IVF centroids (full and rotated), the random rotation and the cluster table (`ivf_centroids.bin`).
    IvfCentroids = 7,
    /// IVF posting blocks: per cluster, ids, estimator factors and 1-bit codes (`ivf_postings.bin`).
    IvfPostings = 8,
    /// IVF full-precision vectors in cluster order, for rescoring (`ivf_vectors.bin`).
    IvfVectors = 9,
    /// The internal ids of a living index's segment, ascending u32 (`ids.bin`).
    SegmentIds = 10,
    /// The SPLADE first stage's term directory and quantisation scale (`splade_terms.bin`).
    SpladeTerms = 11,
    /// The SPLADE first stage's impact-ordered postings (`splade_postings.bin`).
    SpladePostings = 12,
    /// The token stage's quantizer (tops, leaves) and its lists' directory (`token_centroids.bin`).
    TokenCentroids = 13,
    /// The token stage's lists: per leaf, its documents, delta-coded and bit-packed (`token_lists.bin`).
    TokenLists = 14,
    /// A grouped index's segment: each group's name and its run of records (`groups.bin`).
    SegmentGroups = 15,
}

impl FileKind {
    pub const ALL: [FileKind; 15] = [
        FileKind::Vectors,
        FileKind::Offsets,
        FileKind::CodecParams,
        FileKind::Pooled,
        FileKind::Texts,
        FileKind::TextOffsets,
        FileKind::IvfCentroids,
        FileKind::IvfPostings,
        FileKind::IvfVectors,
        FileKind::SegmentIds,
        FileKind::SpladeTerms,
        FileKind::SpladePostings,
        FileKind::TokenCentroids,
        FileKind::TokenLists,
        FileKind::SegmentGroups,
    ];

    /// The files of a token-vector store directory (the others belong to a search index).
    pub const STORE: [FileKind; 3] = [FileKind::Vectors, FileKind::Offsets, FileKind::CodecParams];

    pub fn from_u32(value: u32) -> Option<FileKind> {
        FileKind::ALL.into_iter().find(|k| *k as u32 == value)
    }

    /// Name used in the manifest and in messages.
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Vectors => "vectors",
            FileKind::Offsets => "offsets",
            FileKind::CodecParams => "codec_params",
            FileKind::Pooled => "pooled",
            FileKind::Texts => "texts",
            FileKind::TextOffsets => "text_offsets",
            FileKind::IvfCentroids => "ivf_centroids",
            FileKind::IvfPostings => "ivf_postings",
            FileKind::IvfVectors => "ivf_vectors",
            FileKind::SegmentIds => "segment_ids",
            FileKind::SpladeTerms => "splade_terms",
            FileKind::SpladePostings => "splade_postings",
            FileKind::TokenCentroids => "token_centroids",
            FileKind::TokenLists => "token_lists",
            FileKind::SegmentGroups => "segment_groups",
        }
    }

    /// The version this build writes in the header of a file of this kind: [`FORMAT_VERSION`],
    /// except for the kinds whose layout changed on its own since.
    pub fn version(self) -> u32 {
        match self {
            FileKind::TextOffsets => TEXT_OFFSETS_VERSION,
            _ => FORMAT_VERSION,
        }
    }

    /// The header versions this build reads for a file of this kind.
    pub fn readable_versions(self) -> VersionRange {
        match self {
            FileKind::TextOffsets => TEXT_OFFSETS_READABLE_VERSIONS,
            _ => READABLE_VERSIONS,
        }
    }

    /// File name inside an index directory.
    pub fn file_name(self) -> &'static str {
        match self {
            FileKind::Vectors => "vectors.bin",
            FileKind::Offsets => "offsets.bin",
            FileKind::CodecParams => "codec.bin",
            FileKind::Pooled => "pooled.bin",
            FileKind::Texts => "texts.bin",
            FileKind::TextOffsets => "text_offsets.bin",
            FileKind::IvfCentroids => "ivf_centroids.bin",
            FileKind::IvfPostings => "ivf_postings.bin",
            FileKind::IvfVectors => "ivf_vectors.bin",
            FileKind::SegmentIds => "ids.bin",
            FileKind::SpladeTerms => "splade_terms.bin",
            FileKind::SpladePostings => "splade_postings.bin",
            FileKind::TokenCentroids => "token_centroids.bin",
            FileKind::TokenLists => "token_lists.bin",
            FileKind::SegmentGroups => "groups.bin",
        }
    }
}
