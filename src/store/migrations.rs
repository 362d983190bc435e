//! Schema migrations: plain SQL files in `schema/sqlite/`, embedded, applied in order and
//! recorded in `schema_migrations`.
//!
//! Architecture Invariant: migrations are append-only. A released file is never edited
//! (its checksum is pinned by a test below); a schema change is a new file.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

/// One migration: its version (the file's number), name and SQL, and for the few changes
/// SQL cannot express (keys are blake3 digests) a Rust step run after the SQL, in the same
/// transaction.
pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
    pub rust_step: Option<fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>>,
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_init",
        sql: include_str!("../../schema/sqlite/0001_init.sql"),
        rust_step: None,
    },
    Migration {
        version: 2,
        name: "0002_run_failure_reason",
        sql: include_str!("../../schema/sqlite/0002_run_failure_reason.sql"),
        rust_step: None,
    },
    Migration {
        version: 3,
        name: "0003_samples",
        sql: include_str!("../../schema/sqlite/0003_samples.sql"),
        rust_step: None,
    },
    Migration {
        version: 4,
        name: "0004_echo_chance",
        sql: include_str!("../../schema/sqlite/0004_echo_chance.sql"),
        rust_step: None,
    },
    Migration {
        version: 5,
        name: "0005_significance",
        sql: include_str!("../../schema/sqlite/0005_significance.sql"),
        rust_step: None,
    },
    Migration {
        version: 6,
        name: "0006_model_step",
        sql: include_str!("../../schema/sqlite/0006_model_step.sql"),
        rust_step: None,
    },
    Migration {
        version: 7,
        name: "0007_logprobs",
        sql: include_str!("../../schema/sqlite/0007_logprobs.sql"),
        rust_step: None,
    },
    Migration {
        version: 8,
        name: "0008_local_identity_by_digest",
        sql: include_str!("../../schema/sqlite/0008_local_identity_by_digest.sql"),
        rust_step: Some(super::local_identity::rewrite_local_identities),
    },
    Migration {
        version: 9,
        name: "0009_served_version",
        sql: include_str!("../../schema/sqlite/0009_served_version.sql"),
        rust_step: None,
    },
    Migration {
        version: 10,
        name: "0010_row_order",
        sql: include_str!("../../schema/sqlite/0010_row_order.sql"),
        rust_step: None,
    },
    Migration {
        version: 11,
        name: "0011_blind_baseline",
        sql: include_str!("../../schema/sqlite/0011_blind_baseline.sql"),
        rust_step: None,
    },
];

/// The schema version this binary writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TEXT NOT NULL
) STRICT";

/// Applies pending migrations in one immediate transaction, so two processes opening a
/// new cache at once do not both apply them. Returns `Some(version)` without touching
/// anything when the file's schema is newer than this binary's.
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<Option<i64>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(CREATE_LEDGER)?;
    let found = current_version(&tx)?;
    if found > SCHEMA_VERSION {
        return Ok(Some(found));
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.execute_batch(migration.sql)?;
        if let Some(step) = migration.rust_step {
            step(&tx)?;
        }
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at)
             VALUES (?1, ?2, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            (migration.version, migration.name, checksum(migration.sql)),
        )?;
    }
    tx.commit()?;
    Ok(None)
}

/// The highest applied version; 0 when the ledger is missing or empty.
pub(crate) fn current_version(conn: &Connection) -> rusqlite::Result<i64> {
    let has_ledger: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations')",
        [],
        |row| row.get(0),
    )?;
    if !has_ledger {
        return Ok(0);
    }
    conn.query_row("SELECT max(version) FROM schema_migrations", [], |row| {
        row.get::<_, Option<i64>>(0)
    })
    .optional()
    .map(|v| v.flatten().unwrap_or(0))
}

/// blake3 of the SQL text, recorded so an edited migration can be told apart later.
pub(crate) fn checksum(sql: &str) -> String {
    blake3::hash(sql.as_bytes()).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_consecutive_and_match_file_names() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }

    /// Released migrations are never edited: existing caches already ran them. If this
    /// fails, revert the edit and add a new migration file instead.
    #[test]
    fn released_migrations_are_unchanged() {
        let pinned = [
            "094475a3fb24b732d005dcca5746e98634fe3476991c7cb16853dc10c21a8f2d",
            "c001fd120a0b678511e07948dea0246cbe67257bb670e7ea02517fd436120eac",
            "fd41fa467da1aaa391082cc4645e6c309dde97023e446130cf234dd4bc7001b4",
            "2cf11a4128b5be1eaf7561a5288997324c72f2bfcd3572cbcc32a021050a0394",
            "9f2d093fa92d71c8c44745aa27e34d27da3859365eb405e40870517ea45921ae",
            "963442b20bc0131b17960e48dae2139c81c3bf4b7759e19ac0d74bbaec24b83c",
            "7af8d9cf2df50b559f40f46dd35ab6ca452c9ec03729430f0b3d121d77edb62b",
            "66a40429ae7de53cf48dca415592b8e323f12109dc425aa2df875263ac1670bf",
            "1bfc5f60a35911893008590e5210e573559dc48eac3162dbf8ffbc2d62da2bf6",
            "2edfdc6beb95c10077721765f79cef9da88e1c040dec1c45d8b3300f9a4cb26f",
            "98de58b4df8090e2e8ee936154ad4b540347ff936794771bfdb2548bd9ca414d",
        ];
        assert_eq!(
            pinned.len(),
            MIGRATIONS.len(),
            "pin the checksum of each new migration here"
        );
        for (m, pinned) in MIGRATIONS.iter().zip(pinned) {
            assert_eq!(
                checksum(m.sql),
                pinned,
                "schema/sqlite/{}.sql was edited",
                m.name
            );
        }
    }
}
