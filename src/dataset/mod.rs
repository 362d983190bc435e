//! Datasets: descriptors, the CSV loader, the catalog of known datasets, serialization,
//! and what the `datasets` command does with them (import, fetch, summaries, synthetic files).

pub mod catalog;
pub mod csv;
pub mod descriptor;
pub mod entropy;
pub mod fetch;
pub mod import;
pub mod serialize;
pub mod summary;
pub mod synth;
pub mod table;

pub use descriptor::{Dataset, Descriptor};
pub use serialize::Serialization;
pub use table::{Column, ColumnKind, Table, Value};
