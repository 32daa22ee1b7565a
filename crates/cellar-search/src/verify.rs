//! `Index::verify`: every byte of an open index against its checksums (`cellar inspect
//! --verify`). `Index::open` has already checked every header, the small files' checksums and
//! that the parts agree with `index.json`; this reads the rest: every record of the vector store
//! and of the texts against its own checksum and each body against its header, `pooled.bin`, the
//! IVF's blocks and vectors, and every BM25 file through its footer checksum.

use std::path::{Path, PathBuf};

use cellar_core::format::manifest::MANIFEST_FILE;
use cellar_core::format::FileKind;
use cellar_core::{CellarError, Result};

use crate::bm25::Bm25Index;
use crate::config::CONFIG_FILE;
use crate::index::{Index, BM25_DIR, PCA_FILE, VECTORS_DIR};
use crate::ivf::{IVF_CONFIG_FILE, IVF_DIR};
use crate::pooled::PooledMatrix;

/// One file (or directory) of the index that [`Index::verify`] checked, and what it read there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Relative to the index directory.
    pub file: PathBuf,
    pub what: String,
}

impl Index {
    /// Checks every file of the index, calling `each` after each one; the first damage found is
    /// the error (`Corrupted` naming the file and offset).
    pub fn verify(&self, mut each: impl FnMut(&Checked)) -> Result<()> {
        let mut done = |file: PathBuf, what: String| each(&Checked { file, what });
        let docs = self.config.build.docs;
        done(
            CONFIG_FILE.into(),
            format!("{docs} documents, dimension {}: every part agrees", self.config.token_dim()),
        );
        let vectors = Path::new(VECTORS_DIR);
        done(vectors.join(MANIFEST_FILE), "agrees with the headers of the store's files".into());
        for kind in [FileKind::Offsets, FileKind::CodecParams] {
            done(vectors.join(kind.file_name()), "header and body checksum".into());
        }
        let records = self.store.verify()?;
        done(
            vectors.join(FileKind::Vectors.file_name()),
            format!("{records} records against their checksums, body checksum"),
        );
        let version = self.texts.offsets_version();
        done(
            FileKind::TextOffsets.file_name().into(),
            format!("version {version}: header and body checksum"),
        );
        let texts = self.texts.verify()?;
        let checked = if texts.record_crcs > 0 {
            format!("{} records against their checksums", texts.record_crcs)
        } else {
            format!("{} records parsed (text_offsets.bin version 1 has no record checksums)", texts.records)
        };
        done(FileKind::Texts.file_name().into(), format!("{checked}, body checksum"));
        let bytes = PooledMatrix::verify(&self.dir, self.config.encoder.model_dim, self.base_len())?;
        done(FileKind::Pooled.file_name().into(), format!("{docs} rows, {bytes} bytes, body checksum"));
        self.verify_pca(&mut done)?;
        if let Some(ivf) = self.current_ivf() {
            let dir = Path::new(IVF_DIR);
            done(dir.join(IVF_CONFIG_FILE), "agrees with the index and its files".into());
            done(dir.join(FileKind::IvfCentroids.file_name()), "header and body checksum".into());
            let (clusters, rows) = ivf.verify()?;
            let postings = format!("{clusters} posting blocks against their checksums, body checksum");
            done(dir.join(FileKind::IvfPostings.file_name()), postings);
            let vectors = format!("{rows} vectors against their checksums, body checksum");
            done(dir.join(FileKind::IvfVectors.file_name()), vectors);
        }
        if let Some(splade) = &self.splade {
            let dir = Path::new(crate::splade::SPLADE_DIR);
            done(dir.join(crate::splade::SPLADE_CONFIG), "agrees with the index and its files".into());
            done(dir.join(FileKind::SpladeTerms.file_name()), "header and body checksum".into());
            let postings = splade.verify()?;
            done(
                dir.join(FileKind::SpladePostings.file_name()),
                format!("{postings} postings, body checksum"),
            );
        }
        if let Some(tokens) = self.current_tokens() {
            let dir = Path::new(crate::tokens::TOKENS_DIR);
            done(dir.join(crate::tokens::TOKENS_CONFIG_FILE), "agrees with the index and its files".into());
            done(dir.join(FileKind::TokenCentroids.file_name()), "header and body checksum".into());
            let postings = tokens.verify()?;
            done(
                dir.join(FileKind::TokenLists.file_name()),
                format!("{postings} postings, every list against its checksum, body checksum"),
            );
        }
        let bm25 = Bm25Index::verify(&self.dir.join(BM25_DIR))?;
        done(BM25_DIR.into(), format!("{bm25} documents, every file's footer checksum"));
        self.verify_live(&mut done)
    }

    fn verify_pca(&self, done: &mut impl FnMut(PathBuf, String)) -> Result<()> {
        let path = self.dir.join(PCA_FILE);
        match (&self.pca, path.exists()) {
            (Some(pca), _) => {
                done(PCA_FILE.into(), format!("checksum, {} → {} dimensions", pca.in_dim(), pca.out_dim()));
                Ok(())
            }
            (None, true) => Err(CellarError::corrupted(
                &path,
                0,
                format!("{CONFIG_FILE} gives no pca_dim, yet the index has a {PCA_FILE}"),
            )),
            (None, false) => Ok(()),
        }
    }
}
