//! What every benchmark shares, declared once: nearest-rank percentiles and means (`stats`),
//! memory cgroups (`cgroup`), child processes in them and what /proc says about them (`child`),
//! the provenance record every report starts with (`provenance`), and writing `PREFIX.json` +
//! `PREFIX.md` (`output`).

pub mod cgroup;
pub mod child;
pub mod output;
pub mod provenance;
pub mod stats;
