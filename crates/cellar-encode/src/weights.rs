//! Named tensors of a safetensors file, looked up with or without the `bert.` prefix.
//!
//! The file is memory-mapped while a network is built and each tensor is copied out (as f32)
//! only when asked for, so loading holds the network being built plus one tensor, not the
//! file and every tensor besides. A large embedding table can stay on disk instead
//! ([`Weights::rows`]): its rows are read when a batch names them.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use cellar_core::Result;

use crate::errors::model_err;

/// The tensors of one safetensors file, copied out as f32 on the CPU when asked for.
pub(crate) struct Weights {
    /// The mapped file.
    file: MmapedSafetensors,
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
        // SAFETY: the mapping lives only while a network is built from it, and every tensor is
        // copied out of it; a model file truncated by another process during those seconds could
        // fault, as any reader of a file that shrinks under it.
        let file = unsafe { MmapedSafetensors::new(path) }
            .map_err(|e| model_err(path, format!("not a readable safetensors file: {e}")))?;
        Ok(Weights { file, prefix: "", path: path.to_path_buf() })
    }

    /// The BERT tensor `name` (prefix added), checked to have `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let t = self.raw(&full).ok_or_else(|| model_err(&self.path, format!("missing tensor {full}")))?;
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
    pub fn get_opt(&self, name: &str) -> Option<Tensor> {
        self.raw(&format!("{}{name}", self.prefix))
    }

    /// Whether the file has a tensor under exactly `name`.
    pub fn has(&self, name: &str) -> bool {
        self.file.get(name).is_ok()
    }

    /// The tensor stored under exactly `name`, as f32 (integer tensors as they are), if any
    /// can be read.
    pub fn raw(&self, name: &str) -> Option<Tensor> {
        let t = self.file.load(name, &Device::Cpu).ok()?;
        match t.dtype() {
            DType::F16 | DType::BF16 | DType::F64 => t.to_dtype(DType::F32).ok(),
            _ => Some(t), // f32, and integer buffers (e.g. position_ids) that are never read as weights
        }
    }

    /// The BERT table `name` (prefix added) of `shape` (rows, columns), left on disk: its rows
    /// are read from the file when a batch names them.
    pub fn rows(&self, name: &str, shape: [usize; 2]) -> Result<DiskRows> {
        DiskRows::open(&self.path, &format!("{}{name}", self.prefix), shape)
    }

    /// The file the tensors came from.
    pub fn path(&self) -> &Path {
        &self.path
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
    dtype: DType,
    rows: usize,
    cols: usize,
}

/// The largest safetensors header read (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

impl DiskRows {
    fn open(path: &Path, name: &str, shape: [usize; 2]) -> Result<DiskRows> {
        let bad = |detail: String| model_err(path, detail);
        let mut file = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
        let file_len = file.metadata().map_err(|e| bad(format!("cannot stat: {e}")))?.len();
        let mut len = [0u8; 8];
        file.read_exact(&mut len).map_err(|e| bad(format!("no safetensors header: {e}")))?;
        let header_len = u64::from_le_bytes(len);
        if header_len > MAX_HEADER || 8 + header_len > file_len {
            return Err(bad(format!("safetensors header of {header_len} bytes does not fit the file")));
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header).map_err(|e| bad(format!("cannot read the safetensors header: {e}")))?;
        let header: HashMap<String, serde_json::Value> = serde_json::from_slice(&header)
            .map_err(|e| bad(format!("safetensors header is not a JSON map: {e}")))?;
        let entry = header.get(name).ok_or_else(|| bad(format!("missing tensor {name}")))?;
        let dtype = match entry["dtype"].as_str() {
            Some("F32") => DType::F32,
            Some("F16") => DType::F16,
            Some("BF16") => DType::BF16,
            other => {
                return Err(bad(format!(
                    "tensor {name} has dtype {other:?}; an embedding table is F32, F16 or BF16"
                )))
            }
        };
        let dims: Option<Vec<usize>> = entry["shape"]
            .as_array()
            .map(|a| a.iter().filter_map(|d| d.as_u64().map(|d| d as usize)).collect());
        if dims.as_deref() != Some(&shape[..]) {
            return Err(bad(format!("tensor {name} has shape {dims:?}, config.json implies {shape:?}")));
        }
        let offsets: Option<Vec<u64>> =
            entry["data_offsets"].as_array().map(|a| a.iter().filter_map(|o| o.as_u64()).collect());
        let [begin, end] = offsets.as_deref().unwrap_or(&[]) else {
            return Err(bad(format!("tensor {name} has no data_offsets pair")));
        };
        let start = 8 + header_len + begin;
        let want = (shape[0] * shape[1] * dtype.size_in_bytes()) as u64;
        if end.checked_sub(*begin) != Some(want) || 8 + header_len + end > file_len {
            return Err(bad(format!(
                "tensor {name}'s data ({begin}..{end}) is not {want} bytes inside the file"
            )));
        }
        Ok(DiskRows {
            file,
            path: path.to_path_buf(),
            name: name.to_string(),
            start,
            dtype,
            rows: shape[0],
            cols: shape[1],
        })
    }

    /// The rows named by `ids`, in order, as an `(ids.len(), cols)` f32 tensor; each distinct id
    /// is read once.
    pub fn select(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let (cols, elem) = (self.cols, self.dtype.size_in_bytes());
        let mut first: HashMap<u32, usize> = HashMap::new();
        let mut out = vec![0f32; ids.len() * cols];
        let mut raw = vec![0u8; cols * elem];
        for (i, &id) in ids.iter().enumerate() {
            let row = i * cols..(i + 1) * cols;
            if let Some(&seen) = first.get(&id) {
                out.copy_within(seen * cols..(seen + 1) * cols, row.start);
                continue;
            }
            if id as usize >= self.rows {
                candle_core::bail!("token id {id} is past the {} rows of {}", self.rows, self.name);
            }
            let at = self.start + (id as usize * cols * elem) as u64;
            self.file.read_exact_at(&mut raw, at).map_err(|e| {
                candle_core::Error::Msg(format!(
                    "reading row {id} of {} in {}: {e}",
                    self.name,
                    self.path.display()
                ))
            })?;
            let dst = &mut out[row];
            match self.dtype {
                DType::F32 => raw
                    .chunks_exact(4)
                    .zip(dst)
                    .for_each(|(b, d)| *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                DType::F16 => raw
                    .chunks_exact(2)
                    .zip(dst)
                    .for_each(|(b, d)| *d = half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
                _ => raw
                    .chunks_exact(2)
                    .zip(dst)
                    .for_each(|(b, d)| *d = half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
            }
            first.insert(id, i);
        }
        Tensor::from_vec(out, (ids.len(), cols), &Device::Cpu)
    }
}

#[cfg(test)]
mod tests {
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
        let err = DiskRows::open(&cut, "t32", [5, 3]).err().unwrap().to_string();
        assert!(err.contains("does not fit the file"), "{err}");
        let err = Weights::load_plain(&cut).err().unwrap().to_string();
        assert!(err.contains("not a readable safetensors file"), "{err}");
    }
}
