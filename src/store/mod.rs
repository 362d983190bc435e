//! The cache and result store: one SQLite file holding every request and response
//! (content-addressed by [`RequestKey`](crate::request::RequestKey)), the models, datasets and
//! runs, and the trial and cell results that reports are computed from.
//!
//! Architecture Invariant: `store` is the only module that touches SQLite, and [`Store`]
//! is the only type that owns a connection. There is no column for API keys, headers or
//! endpoints anywhere in the schema: secrets cannot reach the cache.
//!
//! Concurrency: the file is in WAL mode with a busy timeout, and every write is a short
//! `BEGIN IMMEDIATE` transaction (a deferred transaction that reads first and then writes
//! fails at once with `SQLITE_BUSY` when another process wrote in between; an immediate one
//! waits for the lock instead). So several processes can run on one cache file at once.
//! Each response is committed as it arrives: a killed process loses nothing it had stored.
//! `synchronous=NORMAL` keeps commits cheap; it can lose the last commits on power loss,
//! never on a crash of the process, and never corrupts the file.

mod blind;
mod cache;
mod error;
mod local_identity;
mod logprobs;
mod merge;
mod migrations;
mod results;
mod row_order;
mod runs;
mod served;
mod status;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, Row, Transaction, TransactionBehavior};
use serde::de::DeserializeOwned;

pub use blind::BlindBaselineRow;
pub use error::{Result, StoreError};
pub use logprobs::LikelihoodCellRow;
pub use merge::{MAX_MERGE_INPUTS, MergeError, MergeReport, MergedInput, check_merge_inputs};
pub use migrations::SCHEMA_VERSION;
pub use results::{CellRow, OWN_SOURCE, TrialRow};
pub use row_order::RowOrderCellRow;
pub use runs::{DatasetRow, FailureRow, ModelRow, RunCounts, RunId, RunRow, RunStatus};
pub use served::{ServedVersion, describe_served, served_models};
pub use status::{ModelUsage, StatusReport};

use error::AtPath;

/// How long a write waits for another process's write to finish before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// `PRAGMA application_id` of a tabcontam cache ('tbct'), set by the first migration.
const APPLICATION_ID: i32 = 0x7462_6374;

/// The first 16 bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The SQL expression for "now" in the schema's timestamp format.
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// The cache file and its one connection. `Send`: the async runner moves it to a writer
/// thread; it is not `Sync`, calls are serialized by whoever owns it.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    read_only: bool,
    /// Opened by [`Store::open_for_run`] on a missing file: reads as empty, and
    /// [`Store::create_if_missing`] creates the file.
    missing: bool,
}

thread_local! {
    /// Cache files opened by this thread (see [`files_opened_on_this_thread`]).
    static FILES_OPENED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread has opened a cache file (an in-memory stand-in for a missing
/// file does not count). A command opens its cache once and hands the store down; the
/// tests hold the commands to that with this count.
pub fn files_opened_on_this_thread() -> u64 {
    FILES_OPENED.with(|n| n.get())
}

fn count_file_opened() {
    FILES_OPENED.with(|n| n.set(n.get() + 1));
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl Store {
    /// Opens (or creates) the cache at `path` for reading and writing, creating its folder
    /// and applying pending migrations.
    ///
    /// A file that is not a tabcontam cache is refused and left byte-for-byte untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        let exists = check_header(&path)?;
        if exists && is_read_only_file(&path) {
            // Checked by permission bits rather than by trying: root can write anyway, and
            // a cache someone marked read-only should stay that way.
            return Err(StoreError::ReadOnly { path });
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .at(&path)?;
        count_file_opened();
        let mut store = Store {
            conn,
            path,
            read_only: false,
            missing: false,
        };
        store.conn.busy_timeout(BUSY_TIMEOUT).at(&store.path)?;
        // Switching a new file to WAL needs its exclusive lock, and SQLite answers a
        // connection that meets another one mid-switch with SQLITE_BUSY at once, without
        // its busy handler (waiting could deadlock). Several processes opening one new cache
        // at the same moment is normal (`tests/store.rs`), so the opening steps, each
        // idempotent, are retried until the busy timeout.
        let deadline = Instant::now() + BUSY_TIMEOUT;
        let newer = loop {
            match store.prepare_for_writing() {
                Err(StoreError::Busy { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        match newer {
            None => Ok(store),
            Some(found) => Err(StoreError::NewerSchema {
                path: store.path,
                found,
                known: SCHEMA_VERSION,
            }),
        }
    }

    /// The steps after opening a writable connection: owner check, WAL, pragmas, pending
    /// migrations. `Some(version)` when the file's schema is newer than this binary's.
    fn prepare_for_writing(&mut self) -> Result<Option<i64>> {
        // Before anything writes to the file (switching to WAL rewrites the header).
        self.check_owner()?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .at(&self.path)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Sqlite {
                path: self.path.clone(),
                message: format!("cannot switch to WAL mode (journal mode stays `{mode}`)"),
            });
        }
        self.conn
            .execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .at(&self.path)?;
        self.tune()?;
        migrations::migrate(&mut self.conn).at(&self.path)
    }

    /// Opens the cache for commands that must not change it (plan, status). A missing file
    /// reads as an empty cache and is not created. Writes return an error.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let exists = check_header(&path)?;
        let conn = if exists {
            let conn = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .at(&path)?;
            count_file_opened();
            conn
        } else {
            Connection::open_in_memory().at(&path)?
        };
        let mut store = Store {
            conn,
            path,
            read_only: true,
            missing: false,
        };
        store.conn.busy_timeout(BUSY_TIMEOUT).at(&store.path)?;
        store.check_owner()?;
        let found = migrations::current_version(&store.conn).at(&store.path)?;
        if found == 0 {
            // Missing or empty file: an empty schema in memory answers every query with
            // nothing, so callers need no special case.
            store.conn = Connection::open_in_memory().at(&store.path)?;
            migrations::migrate(&mut store.conn).at(&store.path)?;
            return Ok(store);
        }
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: store.path,
                found,
                known: SCHEMA_VERSION,
            });
        }
        if found < SCHEMA_VERSION {
            return Err(StoreError::OlderSchema {
                path: store.path,
                found,
                known: SCHEMA_VERSION,
            });
        }
        store
            .conn
            .execute_batch("PRAGMA query_only = ON;")
            .at(&store.path)?;
        store.tune()?;
        Ok(store)
    }

    /// Opens the cache a run reads and then writes, with one connection for both, without
    /// writing before the run's checks have passed: an existing cache is opened for writing
    /// now (a foreign file is refused untouched; an older schema is upgraded, keeping every
    /// answer), a missing one reads as empty and is created by [`Store::create_if_missing`].
    pub fn open_for_run(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref();
        if check_header(path)? {
            return Store::open(path);
        }
        let mut store = Store::open_read_only(path)?;
        store.missing = true;
        Ok(store)
    }

    /// Creates the file of a store that [`Store::open_for_run`] found missing (a no-op
    /// otherwise); from here on the store takes writes.
    pub fn create_if_missing(&mut self) -> Result<()> {
        if self.missing {
            *self = Store::open(&self.path)?;
        }
        Ok(())
    }

    /// The cache file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this store was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The applied schema version.
    pub fn schema_version(&self) -> Result<i64> {
        migrations::current_version(&self.conn).at(&self.path)
    }

    /// Memory settings: keys are random hashes, so inserts and probes touch pages all over
    /// the key indexes; a page cache that holds them avoids rereading pages from disk.
    fn tune(&self) -> Result<()> {
        self.conn
            .execute_batch("PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY;")
            .at(&self.path)
    }

    /// Refuses databases of other programs: a file with tables but without our
    /// `application_id`. Also the first read, so a damaged file fails here.
    fn check_owner(&self) -> Result<()> {
        let (application_id, tables): (i32, i64) = self
            .conn
            .query_row(
                "SELECT (SELECT application_id FROM pragma_application_id()),
                        (SELECT count(*) FROM sqlite_schema WHERE type = 'table')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .at(&self.path)?;
        if application_id == APPLICATION_ID || (application_id == 0 && tables == 0) {
            Ok(())
        } else {
            Err(StoreError::NotACache {
                path: self.path.clone(),
                why: "an SQLite database of another program",
            })
        }
    }

    /// Starts a write transaction that takes the write lock at once (see the module doc).
    fn write(&mut self) -> Result<Transaction<'_>> {
        if self.read_only {
            return Err(StoreError::OpenedReadOnly {
                path: self.path.clone(),
            });
        }
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .at(&self.path)
    }
}

/// Whether `path` exists; errors when it exists but is not an SQLite file. Reads only the
/// first 16 bytes, never writes. An empty file counts as a new cache (SQLite does too).
fn check_header(path: &Path) -> Result<bool> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(StoreError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(StoreError::NotACache {
            path: path.to_path_buf(),
            why: "a folder",
        });
    }
    let mut header = Vec::with_capacity(16);
    (&mut file)
        .take(16)
        .read_to_end(&mut header)
        .map_err(|source| StoreError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if header.is_empty() || header == SQLITE_MAGIC {
        Ok(true)
    } else {
        Err(StoreError::NotACache {
            path: path.to_path_buf(),
            why: "not an SQLite database",
        })
    }
}

fn is_read_only_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.permissions().readonly())
}

/// Reads a text column holding a kebab-case enum id (parsed through serde, so it stays in
/// step with the enum's spelling).
fn enum_column<T: DeserializeOwned>(row: &Row<'_>, column: &str) -> rusqlite::Result<T> {
    let text: String = row.get(column)?;
    serde_json::from_value(serde_json::Value::String(text.clone()))
        .map_err(|_| conversion_error(row, column, format!("unknown value `{text}`")))
}

/// Reads a text column holding JSON.
fn json_column<T: DeserializeOwned>(row: &Row<'_>, column: &str) -> rusqlite::Result<T> {
    let text: String = row.get(column)?;
    serde_json::from_str(&text).map_err(|e| conversion_error(row, column, e.to_string()))
}

fn conversion_error(row: &Row<'_>, column: &str, message: String) -> rusqlite::Error {
    let index = row.as_ref().column_index(column).unwrap_or_default();
    rusqlite::Error::FromSqlConversionFailure(
        index,
        Type::Text,
        format!("column `{column}`: {message}").into(),
    )
}
