//! Store errors: one line each, naming the cache file and saying what to do.

use std::path::{Path, PathBuf};

use rusqlite::ErrorCode;

/// Everything that can go wrong with the cache file.
///
/// SQLite's own message is part of the text (not a `source`), so `{:#}` at the binary edge
/// prints each cause once.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the cache folder {}: {source}; pass another --cache", dir.display())]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}; pass another --cache", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a tabcontam cache ({why}); pass another --cache or move it away", path.display())]
    NotACache { path: PathBuf, why: &'static str },
    #[error(
        "{} is read-only; make it and its folder writable (chmod u+w) or pass another --cache",
        path.display()
    )]
    ReadOnly { path: PathBuf },
    #[error(
        "{} was opened for reading only (this command must not change the cache); this is a bug in tabcontam",
        path.display()
    )]
    OpenedReadOnly { path: PathBuf },
    #[error(
        "{} was written by a newer tabcontam (schema version {found}; this binary knows up to {known}); upgrade tabcontam or pass another --cache",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "{} has schema version {found}, older than this binary's {known}; run a command that writes the cache (e.g. `tabcontam run`) once to upgrade it",
        path.display()
    )]
    OlderSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "{} is corrupt ({message}); restore it from a backup, or move it away and rerun to start a new cache",
        path.display()
    )]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "{} stayed locked by another process for more than {seconds} s; wait for it to finish or pass another --cache",
        path.display()
    )]
    Busy { path: PathBuf, seconds: u64 },
    #[error("the disk holding {} is full; free some space and rerun (nothing cached so far is lost)", path.display())]
    Full { path: PathBuf },
    #[error("cannot open {}: {message}; check that the folder exists and is writable, or pass another --cache", path.display())]
    CannotOpen { path: PathBuf, message: String },
    #[error(
        "{}: a stored value cannot be read back ({message}); was it written by another version of tabcontam?",
        path.display()
    )]
    Decode { path: PathBuf, message: String },
    #[error("{}: SQLite error: {message}", path.display())]
    Sqlite { path: PathBuf, message: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// Maps a SQLite error to the message a user can act on.
    pub(crate) fn sqlite(path: &Path, error: rusqlite::Error) -> StoreError {
        let path = path.to_path_buf();
        if let rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) = error
        {
            return StoreError::Decode {
                path,
                message: error.to_string(),
            };
        }
        let message = error.to_string();
        match error.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt { path, message }
            }
            Some(ErrorCode::ReadOnly) => StoreError::ReadOnly { path },
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => StoreError::Busy {
                path,
                seconds: super::BUSY_TIMEOUT.as_secs(),
            },
            Some(ErrorCode::DiskFull) => StoreError::Full { path },
            Some(ErrorCode::CannotOpen) => StoreError::CannotOpen { path, message },
            _ => StoreError::Sqlite { path, message },
        }
    }
}

/// Attaches the cache path to rusqlite results.
pub(crate) trait AtPath<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> AtPath<T> for rusqlite::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| StoreError::sqlite(path, e))
    }
}
