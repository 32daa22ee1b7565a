//! The names of an index directory's parts that several modules write or read (a build, a
//! segment of written documents, recode, verify): declared here, below all of them.

/// Sub-directory of the token-vector store (of the build, and of each written segment).
pub const VECTORS_DIR: &str = "vectors";
/// Sub-directory of the BM25 index.
pub const BM25_DIR: &str = "bm25";
/// File of the PCA projection, when the index has one.
pub const PCA_FILE: &str = "pca.bin";
