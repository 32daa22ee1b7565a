//! Named tensors of a safetensors file, looked up with or without the `bert.` prefix.
//!
//! The file is memory-mapped while a network is built and its header parsed once; each tensor
//! is copied out (as f32) only when asked for, so loading holds the network being built plus
//! one tensor, not the file and every tensor besides. A large embedding table can stay on disk
//! instead ([`Weights::rows`]): its rows are read when a batch names them.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor};
use cellar_core::Result;
use memmap2::{Mmap, UncheckedAdvice};
use safetensors::tensor::{Dtype, Metadata, SafeTensors, TensorView};

use crate::errors::model_err;

/// The tensors of one safetensors file, copied out as f32 on the CPU when asked for.
pub(crate) struct Weights {
    /// The mapped file.
    map: Mmap,
    /// The file, for dropping what was copied out of it from the page cache.
    file: File,
    /// Its header: every tensor's dtype, shape and byte range.
    meta: Metadata,
    /// Where the tensors' bytes start (after the header's length and the header).
    data_start: usize,
    /// Prefix in front of the BERT tensors' names: `"bert."` or `""`.
    prefix: &'static str,
    /// The file, for error messages.
    path: PathBuf,
}

impl Weights {
    /// Opens `path`, a safetensors file of a BERT model (names with or without `bert.`).
    pub fn load_bert(path: &Path) -> Result<Weights> {
        let mut w = Weights::load_plain(path)?;
        w.prefix = ["bert.", ""]
            .into_iter()
            .find(|p| w.has(&format!("{p}embeddings.word_embeddings.weight")))
            .ok_or_else(|| {
                model_err(
                    path,
                    "no embeddings.word_embeddings.weight (with or without \"bert.\"): not a BERT checkpoint",
                )
            })?;
        Ok(w)
    }

    /// Opens `path` as a plain map of tensors (no BERT prefix).
    pub fn load_plain(path: &Path) -> Result<Weights> {
        if !path.is_file() {
            return Err(model_err(path, "missing (a model directory needs model.safetensors)"));
        }
        let file = File::open(path).map_err(|e| model_err(path, format!("cannot open: {e}")))?;
        // SAFETY: the mapping lives only while a network is built from it, and every tensor is
        // copied out of it; a model file truncated by another process during those seconds could
        // fault, as any reader of a file that shrinks under it.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| model_err(path, format!("cannot map: {e}")))?;
        let (header_len, meta) = SafeTensors::read_metadata(&map)
            .map_err(|e| model_err(path, format!("not a readable safetensors file: {e}")))?;
        Ok(Weights { map, file, meta, data_start: 8 + header_len, prefix: "", path: path.to_path_buf() })
    }

    /// The BERT tensor `name` (prefix added), checked to have `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let t = self.raw(&full)?.ok_or_else(|| model_err(&self.path, format!("missing tensor {full}")))?;
        if t.dims() != shape {
            let detail = format!("tensor {full} has shape {:?}, config.json implies {shape:?}", t.dims());
            return Err(model_err(&self.path, detail));
        }
        Ok(t)
    }

    /// The BERT tensor `name` as a flat vector of `len` values.
    pub fn vec(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let t = self.get(name, &[len])?;
        t.to_vec1::<f32>().map_err(|e| model_err(&self.path, format!("tensor {name}: {e}")))
    }

    /// The BERT tensor `name` (prefix added), if the file has it.
    pub fn get_opt(&self, name: &str) -> Result<Option<Tensor>> {
        self.raw(&format!("{}{name}", self.prefix))
    }

    /// Whether the file has a tensor under exactly `name`.
    pub fn has(&self, name: &str) -> bool {
        self.meta.info(name).is_some()
    }

    /// The tensor stored under exactly `name`, as f32 (integer tensors as they are), if the file
    /// has it.
    pub fn raw(&self, name: &str) -> Result<Option<Tensor>> {
        let Some(info) = self.meta.info(name) else { return Ok(None) };
        let (begin, end) = info.data_offsets;
        let (start, end) = (self.data_start + begin, self.data_start + end);
        let t = load_f32(info.dtype, info.shape.clone(), &self.map[start..end])
            .map_err(|e| model_err(&self.path, format!("tensor {name}: {e}")))?;
        self.release(start, end);
        Ok(Some(t))
    }

    /// Drops the pages of bytes `start..end`, a tensor just copied out, from this mapping and
    /// from the page cache: the network reads its weights once, at load, and their file pages
    /// would otherwise stay charged to the process's memory cgroup and counted in its RSS while
    /// mapped (bench/results/model-file-cache.md). Pages shared with a neighbouring tensor are
    /// dropped too and read again if that tensor is asked for. Hints only: a failure is logged
    /// and changes nothing else.
    fn release(&self, start: usize, end: usize) {
        const PAGE: usize = 4096;
        let (from, to) = (start / PAGE * PAGE, end.div_ceil(PAGE).saturating_mul(PAGE).min(self.map.len()));
        if to <= from {
            return;
        }
        // SAFETY: MADV_DONTNEED on a read-only shared mapping of a file only unmaps its pages from
        // this process; the next access reads the file again, with the same bytes. Nothing borrows
        // from `from..to` across this call: the tensor was copied out.
        let unmapped = unsafe { self.map.unchecked_advise_range(UncheckedAdvice::DontNeed, from, to - from) };
        let evicted =
            cellar_core::io::cache::evict_range(&self.file, &self.path, from as u64, (to - from) as u64);
        if let Some(e) = unmapped.err().map(|e| e.to_string()).or(evicted.err().map(|e| e.to_string())) {
            log::debug!("{}: releasing bytes {from}..{to} after loading them: {e}", self.path.display());
        }
    }

    /// The BERT table `name` (prefix added) of `shape` (rows, columns), left on disk: its rows
    /// are read from the file when a batch names them.
    pub fn rows(&self, name: &str, shape: [usize; 2]) -> Result<DiskRows> {
        let full = format!("{}{name}", self.prefix);
        let bad = |detail: String| model_err(&self.path, detail);
        let info = self.meta.info(&full).ok_or_else(|| bad(format!("missing tensor {full}")))?;
        let dtype = info.dtype;
        if !matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(bad(format!(
                "tensor {full} has dtype {dtype:?}; an embedding table is F32, F16 or BF16"
            )));
        }
        if info.shape != shape {
            return Err(bad(format!(
                "tensor {full} has shape {:?}, config.json implies {shape:?}",
                info.shape
            )));
        }
        let file = File::open(&self.path).map_err(|e| bad(format!("cannot open: {e}")))?;
        cellar_core::io::cache::advise_random(&file, &self.path)
            .map_err(|e| bad(format!("cannot advise random reads: {e}")))?;
        Ok(DiskRows {
            file,
            path: self.path.clone(),
            name: full,
            start: (self.data_start + info.data_offsets.0) as u64,
            dtype,
            rows: shape[0],
            cols: shape[1],
        })
    }

    /// The file the tensors came from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Weights {
    /// Once the network is built, drops what is left of the file in the page cache: the pages
    /// read-around brought in next to the tensors copied out (on a cold start, 52 MiB of
    /// all-MiniLM-L6-v2's 87 stayed cached, and charged to a server's memory cgroup, after
    /// every tensor's own range had been released). The word-embedding rows a batch names are
    /// read again on demand; another process using the same file reads it again too. Hints
    /// only, as [`Weights::release`].
    fn drop(&mut self) {
        self.release(0, self.map.len());
        if let Err(e) = cellar_core::io::cache::evict_range(&self.file, &self.path, 0, 0) {
            log::debug!("{}: evicting after load: {e}", self.path.display());
        }
    }
}

/// A 2-D f32, f16 or bf16 table of a safetensors file, read row by row with positioned reads
/// (no mapping: nothing of it is resident but what the page cache keeps, and a file replaced
/// on disk cannot fault the process).
pub(crate) struct DiskRows {
    file: File,
    path: PathBuf,
    name: String,
    /// Where the table's first row starts in the file.
    start: u64,
    dtype: Dtype,
    rows: usize,
    cols: usize,
}

impl DiskRows {
    /// The rows named by `ids`, in order, as an `(ids.len(), cols)` f32 tensor; each distinct id
    /// is read once, in file order, and converted as [`Weights::raw`] converts a whole tensor.
    pub fn select(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let mut distinct = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        if let Some(&id) = distinct.last().filter(|id| **id as usize >= self.rows) {
            candle_core::bail!("token id {id} is past the {} rows of {}", self.rows, self.name);
        }
        // F32, F16 and BF16 (checked in `Weights::rows`) are whole bytes.
        let row_bytes = self.cols * self.dtype.bitsize() / 8;
        let mut raw = vec![0u8; distinct.len() * row_bytes];
        for (&id, dst) in distinct.iter().zip(raw.chunks_exact_mut(row_bytes)) {
            let at = self.start + (id as usize * row_bytes) as u64;
            self.file.read_exact_at(dst, at).map_err(|e| {
                candle_core::Error::Msg(format!(
                    "reading row {id} of {} in {}: {e}",
                    self.name,
                    self.path.display()
                ))
            })?;
        }
        let table =
            load_f32(self.dtype, vec![distinct.len(), self.cols], &raw).map_err(candle_core::Error::Msg)?;
        let at: Vec<u32> = ids.iter().map(|id| distinct.partition_point(|d| d < id) as u32).collect();
        table.index_select(&Tensor::from_vec(at, ids.len(), &Device::Cpu)?, 0)
    }
}

/// A tensor of `dtype` and `shape` from its bytes in the file, floating point as f32 (integer
/// buffers such as position_ids, never read as weights, as they are).
fn load_f32(dtype: Dtype, shape: Vec<usize>, bytes: &[u8]) -> std::result::Result<Tensor, String> {
    let view = TensorView::new(dtype, shape, bytes).map_err(|e| e.to_string())?;
    let t = view.load(&Device::Cpu).map_err(|e| e.to_string())?;
    match t.dtype() {
        DType::F16 | DType::BF16 | DType::F64 => {
            t.to_dtype(DType::F32).map_err(|e| format!("cannot convert to f32: {e}"))
        }
        _ => Ok(t),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A safetensors file with an f32 and an f16 table of 5 x 3, and a vector.
    fn table_file(dir: &Path) -> (PathBuf, Tensor) {
        let values: Vec<f32> = (0..15).map(|i| i as f32 * 0.37 - 2.0).collect();
        let table = Tensor::from_vec(values, (5, 3), &Device::Cpu).unwrap();
        let half = table.to_dtype(DType::F16).unwrap();
        let bias = Tensor::from_vec(vec![1f32, 2.0, 3.0], 3, &Device::Cpu).unwrap();
        let path = dir.join("model.safetensors");
        let tensors: HashMap<String, Tensor> =
            [("t32".to_string(), table.clone()), ("t16".to_string(), half), ("bias".to_string(), bias)]
                .into();
        candle_core::safetensors::save(&tensors, &path).unwrap();
        (path, table)
    }

    #[test]
    fn rows_read_from_disk_are_the_loaded_tables_rows_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = table_file(dir.path());
        let w = Weights::load_plain(&path).unwrap();
        let ids = [4u32, 0, 4, 2, 2, 1, 0];
        let index = Tensor::from_slice(&ids, ids.len(), &Device::Cpu).unwrap();
        for name in ["t32", "t16"] {
            let loaded = w.get(name, &[5, 3]).unwrap().index_select(&index, 0).unwrap();
            let read = w.rows(name, [5, 3]).unwrap().select(&ids).unwrap();
            assert_eq!(read.dims(), [7, 3]);
            let (a, b) = (loaded.to_vec2::<f32>().unwrap(), read.to_vec2::<f32>().unwrap());
            let bits = |m: &Vec<Vec<f32>>| m.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{name}");
        }
    }

    #[test]
    fn a_bad_table_or_token_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = table_file(dir.path());
        let w = Weights::load_plain(&path).unwrap();
        let err = w.rows("t32", [3, 5]).err().unwrap().to_string();
        assert!(err.contains("shape") && err.contains("t32"), "{err}");
        let err = w.rows("nope", [5, 3]).err().unwrap().to_string();
        assert!(err.contains("missing tensor nope"), "{err}");
        let err = w.rows("t32", [5, 3]).unwrap().select(&[1, 5]).unwrap_err().to_string();
        assert!(err.contains("token id 5 is past the 5 rows of t32"), "{err}");
        assert!(w.has("bias") && !w.has("bert.bias"));
        // A header that claims more bytes than the file has.
        let cut = dir.path().join("cut.safetensors");
        std::fs::write(&cut, 10_000u64.to_le_bytes()).unwrap();
        let err = Weights::load_plain(&cut).err().unwrap().to_string();
        assert!(err.contains("not a readable safetensors file"), "{err}");
    }
}
