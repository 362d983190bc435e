//! The catalog of known datasets: shipped and user descriptors, and where their files live.

use std::path::{Path, PathBuf};

use super::{Dataset, Descriptor};

/// All known descriptors plus the directories searched for their files.
pub struct Catalog {
    pub descriptors: Vec<Descriptor>,
    pub search_dirs: Vec<PathBuf>,
}

impl Catalog {
    /// Shipped descriptors, user descriptors, and the data directory given (flag or env).
    pub fn open(data_dir: Option<&Path>) -> anyhow::Result<Self> {
        let _ = data_dir;
        todo!("dataset helper")
    }

    /// The descriptor with this id or alias; an unknown name lists the known ones.
    pub fn find(&self, name: &str) -> anyhow::Result<&Descriptor> {
        let _ = name;
        todo!("dataset helper")
    }

    /// Loads the first present file variant of a dataset.
    pub fn load(&self, name: &str) -> anyhow::Result<Dataset> {
        let _ = name;
        todo!("dataset helper")
    }
}
