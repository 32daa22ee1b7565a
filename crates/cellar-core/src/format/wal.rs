//! The write-ahead log: every acknowledged write is in it before it is acknowledged.
//!
//! ```text
//! file   = header record*
//! header = magic "CELLAR-W" (8 bytes) | version u32 LE | reserved u32 (0)        16 bytes
//!          (WAL_HEADER_FIELDS; the magic and the version keep their place in every version)
//! record = payload length u32 LE | CRC-32C of (length bytes ++ payload) u32 LE | payload
//! ```
//!
//! A batch of records is written with one `write` and, with [`Durability::Fsync`], one
//! `fdatasync` before `append` returns (group commit: a feed batch costs one sync). A crash can
//! leave a torn tail: a record cut short or failing its checksum. Opening the log replays the
//! records up to the first bad one and truncates the file there, so a write that was never
//! acknowledged is never half-visible and the log stays appendable. The log ends at its first
//! bad record: records after it, if any, are dropped too (they cannot have been acknowledged
//! after an unacknowledged one, since batches are written in order and synced before the ack).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::failpoint::{self, FailPoint};
use crate::format::fsio::{sync_dir, TMP_SUFFIX};
use crate::format::VersionRange;
use crate::{CellarError, IoContext, Result};

pub const WAL_MAGIC: [u8; 8] = *b"CELLAR-W";
pub const WAL_VERSION: u32 = 1;
/// The log versions this build replays.
pub const WAL_READABLE_VERSIONS: VersionRange = VersionRange::only(WAL_VERSION);
/// (name, offset, size) of the header's fields, in order (`docs/format/stream.md` draws them).
pub const WAL_HEADER_FIELDS: [(&str, usize, usize); 3] =
    [("magic", 0, 8), ("version", 8, 4), ("reserved", 12, 4)];
/// Bytes of the header: up to the end of its last field.
pub const WAL_HEADER_BYTES: u64 = {
    let (_, offset, size) = WAL_HEADER_FIELDS[WAL_HEADER_FIELDS.len() - 1];
    (offset + size) as u64
};
const RECORD_HEADER_BYTES: usize = 8;
/// Largest payload one record may hold.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// Whether `append` waits for the data to reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` before returning (the default: an acknowledged write survives a crash).
    Fsync,
    /// Leave it to the page cache (tests, bulk loads that can be replayed from their source).
    None,
}

/// What opening the log found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Records replayed.
    pub records: u64,
    /// Bytes of a torn tail cut off the end of the file.
    pub truncated_bytes: u64,
}

/// Syncs a log's file (`Wal::syncer`): every record appended before the call is durable when
/// it returns.
pub struct LogSync {
    file: Arc<File>,
    path: PathBuf,
}

impl LogSync {
    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().at(&self.path)
    }
}

/// An open log, positioned at its end.
pub struct Wal {
    path: PathBuf,
    /// Shared with the log's `LogSync`s.
    file: Arc<File>,
    end: u64,
    durability: Durability,
}

fn wal_field(name: &str) -> std::ops::Range<usize> {
    let (_, offset, size) = WAL_HEADER_FIELDS.iter().find(|f| f.0 == name).expect("log header field name");
    *offset..offset + size
}

fn header_bytes() -> [u8; WAL_HEADER_BYTES as usize] {
    let mut header = [0u8; WAL_HEADER_BYTES as usize];
    header[wal_field("magic")].copy_from_slice(&WAL_MAGIC);
    header[wal_field("version")].copy_from_slice(&WAL_VERSION.to_le_bytes());
    header
}

/// CRC-32C of a record's length field followed by its payload.
fn record_crc(len_field: &[u8; 4], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(len_field), payload)
}

/// Appends `payload` to `out` as one record: length, checksum, payload (at most
/// [`MAX_RECORD_BYTES`]; [`Wal::append`] checks that before framing).
pub fn frame_record(payload: &[u8], out: &mut Vec<u8>) {
    let len_field = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&len_field);
    out.extend_from_slice(&record_crc(&len_field, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

impl Wal {
    /// Opens (or creates) the log at `path`, hands every intact record's payload to `replay` in
    /// order, and truncates a torn tail.
    pub fn open(
        path: &Path,
        durability: Durability,
        mut replay: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<(Wal, Recovery)> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path);
        let file = file.at(path)?;
        let len = file.metadata().at(path)?.len();
        let mut wal =
            Wal { path: path.to_path_buf(), file: Arc::new(file), end: WAL_HEADER_BYTES, durability };
        if len < WAL_HEADER_BYTES {
            // A log whose header never reached the disk cannot hold an acknowledged record.
            wal.write_header()?;
            return Ok((wal, Recovery { records: 0, truncated_bytes: len }));
        }
        wal.check_header()?;
        let recovery = wal.replay(len, &mut replay)?;
        Ok((wal, recovery))
    }

    /// Hands every intact record's payload to `replay`, in order, without changing the file (a
    /// reader beside the process that writes the log); a missing log has no records.
    pub fn read(path: &Path, mut replay: impl FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(CellarError::io(path, e)),
        };
        let len = file.metadata().at(path)?.len();
        let mut wal = Wal {
            path: path.to_path_buf(),
            file: Arc::new(file),
            end: WAL_HEADER_BYTES,
            durability: Durability::None,
        };
        if len < WAL_HEADER_BYTES {
            return Ok(0);
        }
        wal.check_header()?;
        let mut records = 0;
        while let Some(payload) = wal.read_record(len)? {
            replay(&payload)?;
            wal.end += (RECORD_HEADER_BYTES + payload.len()) as u64;
            records += 1;
        }
        Ok(records)
    }

    fn write_header(&mut self) -> Result<()> {
        self.file.set_len(0).at(&self.path)?;
        self.file.write_all_at(&header_bytes(), 0).at(&self.path)?;
        self.file.sync_all().at(&self.path)?;
        sync_dir(self.path.parent().unwrap_or(Path::new(".")))
    }

    fn check_header(&self) -> Result<()> {
        let mut header = [0u8; WAL_HEADER_BYTES as usize];
        self.file.read_exact_at(&mut header, 0).at(&self.path)?;
        if header[wal_field("magic")] != WAL_MAGIC {
            return Err(CellarError::corrupted(&self.path, 0, "not a Cellar write-ahead log (bad magic)"));
        }
        let version = u32::from_le_bytes(header[wal_field("version")].try_into().expect("4 bytes"));
        WAL_READABLE_VERSIONS.check(&self.path, version)
    }

    /// Replays records from the header to the first bad one, then cuts the file there.
    fn replay(&mut self, len: u64, replay: &mut impl FnMut(&[u8]) -> Result<()>) -> Result<Recovery> {
        let mut recovery = Recovery::default();
        while let Some(payload) = self.read_record(len)? {
            replay(&payload)?;
            self.end += (RECORD_HEADER_BYTES + payload.len()) as u64;
            recovery.records += 1;
        }
        if self.end < len {
            recovery.truncated_bytes = len - self.end;
            self.file.set_len(self.end).at(&self.path)?;
            self.file.sync_all().at(&self.path)?;
        }
        Ok(recovery)
    }

    /// The payload of the record at `self.end`, or `None` where the intact log ends.
    fn read_record(&self, len: u64) -> Result<Option<Vec<u8>>> {
        if len - self.end < RECORD_HEADER_BYTES as u64 {
            return Ok(None);
        }
        let mut head = [0u8; RECORD_HEADER_BYTES];
        self.file.read_exact_at(&mut head, self.end).at(&self.path)?;
        let len_field: [u8; 4] = head[..4].try_into().expect("4 bytes");
        let payload_len = u32::from_le_bytes(len_field) as usize;
        let start = self.end + RECORD_HEADER_BYTES as u64;
        if payload_len > MAX_RECORD_BYTES || len - start < payload_len as u64 {
            return Ok(None);
        }
        let mut payload = vec![0u8; payload_len];
        self.file.read_exact_at(&mut payload, start).at(&self.path)?;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        Ok((record_crc(&len_field, &payload) == crc).then_some(payload))
    }

    /// Appends `payloads` as one batch; with [`Durability::Fsync`] they are on disk when this
    /// returns. Nothing is written if any payload is too large.
    pub fn append(&mut self, payloads: &[&[u8]]) -> Result<()> {
        self.append_with(payloads, self.durability == Durability::Fsync)
    }

    /// [`Wal::append`] without the sync, whatever the durability: the records are written (to
    /// the page cache) and the caller makes them durable later, with one [`LogSync::sync`] for
    /// the records of several writers (group commit).
    pub fn append_unsynced(&mut self, payloads: &[&[u8]]) -> Result<()> {
        self.append_with(payloads, false)
    }

    fn append_with(&mut self, payloads: &[&[u8]], sync: bool) -> Result<()> {
        if let Some(big) = payloads.iter().find(|p| p.len() > MAX_RECORD_BYTES) {
            return Err(CellarError::InvalidInput(format!(
                "a log record of {} bytes is over the limit of {MAX_RECORD_BYTES}",
                big.len()
            )));
        }
        let written = self.write_batch(payloads, sync);
        if let Err(e) = written {
            // Best effort: drop what may have been written, so the next batch follows intact data.
            let _ = self.file.set_len(self.end);
            return Err(e);
        }
        self.end += payloads.iter().map(|p| (p.len() + RECORD_HEADER_BYTES) as u64).sum::<u64>();
        Ok(())
    }

    /// Writes each payload's record at the log's end: its header (length, checksum), then the
    /// payload from the caller's buffer (a batch's payload is large: it is not copied to frame
    /// it).
    fn write_batch(&self, payloads: &[&[u8]], sync: bool) -> Result<()> {
        failpoint::check(FailPoint::WalAppend, &self.path).at(&self.path)?;
        let mut at = self.end;
        for payload in payloads {
            let len_field = (payload.len() as u32).to_le_bytes();
            let mut header = [0u8; RECORD_HEADER_BYTES];
            header[..4].copy_from_slice(&len_field);
            header[4..].copy_from_slice(&record_crc(&len_field, payload).to_le_bytes());
            self.file.write_all_at(&header, at).at(&self.path)?;
            self.file.write_all_at(payload, at + RECORD_HEADER_BYTES as u64).at(&self.path)?;
            at += (payload.len() + RECORD_HEADER_BYTES) as u64;
        }
        if sync {
            self.file.sync_data().at(&self.path)?;
        }
        Ok(())
    }

    /// A handle that syncs this log's file from another thread, without the `Wal` (which its
    /// writer holds): what [`Wal::append_unsynced`]'s records wait for. `None` without
    /// durability. (It shares the log's open file: after a `rotate`, take a new one.)
    pub fn syncer(&self) -> Option<LogSync> {
        if self.durability != Durability::Fsync {
            return None;
        }
        Some(LogSync { file: Arc::clone(&self.file), path: self.path.clone() })
    }

    /// Empties the log (after its records were flushed to a segment), durably.
    pub fn reset(&mut self) -> Result<()> {
        self.file.set_len(WAL_HEADER_BYTES).at(&self.path)?;
        self.file.sync_all().at(&self.path)?;
        self.end = WAL_HEADER_BYTES;
        Ok(())
    }

    /// Moves the log's records to `to` and starts this log empty, without copying them: a
    /// flush writes a segment from the records at `to` while new batches go on being logged
    /// here, and a reader replays `to` before this log. The empty log is made first (beside
    /// it, under a temporary name a crash leaves for the writer's sweep), then the two renames;
    /// with [`Durability::Fsync`] the records at `to` and both names are durable when this
    /// returns. After an error the log is rotated exactly when `to` exists (only the last
    /// directory sync fails after the renames); the records are synced first, so a crash
    /// between the renames finds them at `to` and no log (opening makes an empty one).
    pub fn rotate(&mut self, to: &Path) -> Result<()> {
        let durable = self.durability == Durability::Fsync;
        if durable {
            self.file.sync_data().at(&self.path)?;
        }
        let mut fresh = self.path.as_os_str().to_owned();
        fresh.push(TMP_SUFFIX);
        let fresh = PathBuf::from(fresh);
        let made = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&fresh);
        let file = made.at(&fresh)?;
        let header = file.write_all_at(&header_bytes(), 0).and_then(|()| match durable {
            true => file.sync_all(),
            false => Ok(()),
        });
        if let Err(e) = header {
            let _ = std::fs::remove_file(&fresh);
            return Err(CellarError::io(&fresh, e));
        }
        std::fs::rename(&self.path, to).at(&self.path)?;
        if let Err(e) = std::fs::rename(&fresh, &self.path) {
            // Put the records back where appends and readers expect them.
            let _ = std::fs::rename(to, &self.path);
            return Err(CellarError::io(&self.path, e));
        }
        self.file = Arc::new(file);
        self.end = WAL_HEADER_BYTES;
        match durable {
            true => sync_dir(self.path.parent().unwrap_or(Path::new("."))),
            false => Ok(()),
        }
    }

    /// Cuts the log back to `end` bytes (a record boundary [`Wal::len`] gave before an
    /// append), durably: takes back the batches logged after it.
    pub fn truncate(&mut self, end: u64) -> Result<()> {
        if !(WAL_HEADER_BYTES..=self.end).contains(&end) {
            return Err(CellarError::internal(format!(
                "{}: truncating the log to {end} bytes, outside {WAL_HEADER_BYTES}..={}",
                self.path.display(),
                self.end
            )));
        }
        self.file.set_len(end).at(&self.path)?;
        self.file.sync_all().at(&self.path)?;
        self.end = end;
        Ok(())
    }

    /// Bytes in the log, header included.
    pub fn len(&self) -> u64 {
        self.end
    }

    pub fn is_empty(&self) -> bool {
        self.end == WAL_HEADER_BYTES
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
