//! The documents written to an index after its build, as data: the live manifest and the view
//! searches read (`state`) and its memtable (`memtable`), a write batch's bytes in the log (`batch`), a segment's files
//! (`segment`), what a reader last loaded of `live/` (`stamp`). Every stage of a search reads
//! them; what `Index` does with them (write, replay, flush, merge, follow) is the `live` module,
//! above. Kept apart so that the search path (`index`, `bm25`, `rank`, `reads`) imports the data
//! without importing the operations that import it.

use std::path::Path;

use cellar_core::{CellarError, Result};

pub(crate) mod batch;
pub(crate) mod groups;
pub(crate) mod memtable;
pub(crate) mod segment;
pub(crate) mod stamp;
pub(crate) mod state;

use state::LIVE_DIR;

/// Refuses an index that was written to after its build, for `what` (a command that reads the
/// build's files alone and would leave the written documents out, or keep the deleted ones).
pub fn refuse_written(index_dir: &Path, what: &str) -> Result<()> {
    if index_dir.join(LIVE_DIR).exists() {
        return Err(CellarError::invalid(format!(
            "{}: documents were added, updated or deleted after this index was built ({LIVE_DIR}/); \
             {what} reads the build's files alone and would miss those changes",
            index_dir.display()
        )));
    }
    Ok(())
}
