//! Datasets: descriptors, the CSV loader, the catalog of known datasets and serialization.

pub mod catalog;
pub mod csv;
pub mod descriptor;
pub mod serialize;
pub mod synth;
pub mod table;

pub use descriptor::{Dataset, Descriptor};
pub use serialize::Serialization;
pub use table::{Column, ColumnKind, Table, Value};
