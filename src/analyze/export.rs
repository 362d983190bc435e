//! `cache export --format parquet`: requests, responses, trials and cells as Parquet files,
//! written by DuckDB's `COPY … (FORMAT parquet)` from rows loaded through the store API
//! (DuckDB's SQLite scanner would be an extension download; rows go through the same path
//! as the reports instead).

use std::path::{Path, PathBuf};

use duckdb::{Config, Connection, params};
use serde::Serialize;

use super::{Doing, Result};
use crate::probe::NO_SERIALIZATION;
use crate::request::ApiMode;
use crate::store::Store;

/// One Parquet file written.
#[derive(Debug, Clone, Serialize)]
pub struct ExportedFile {
    pub table: &'static str,
    pub path: PathBuf,
    pub rows: u64,
}

const TABLES: &str = "
CREATE TABLE requests (
    key VARCHAR NOT NULL, backend VARCHAR NOT NULL, model VARCHAR NOT NULL,
    revision VARCHAR NOT NULL, api VARCHAR NOT NULL, prompt VARCHAR NOT NULL,
    max_tokens UINTEGER NOT NULL, temperature DOUBLE NOT NULL, top_p DOUBLE, api_seed UBIGINT,
    params VARCHAR NOT NULL, sample UINTEGER NOT NULL);
CREATE TABLE responses (
    key VARCHAR NOT NULL, text VARCHAR NOT NULL, finish_reason VARCHAR,
    prompt_tokens UINTEGER, completion_tokens UINTEGER, latency_ms UBIGINT NOT NULL,
    created_at VARCHAR NOT NULL, served_model VARCHAR, served_fingerprint VARCHAR);
CREATE TABLE trials (
    model VARCHAR NOT NULL, dataset VARCHAR NOT NULL, test VARCHAR NOT NULL,
    serialization VARCHAR, seed UBIGINT NOT NULL, sample UINTEGER NOT NULL,
    trial UINTEGER NOT NULL, run_id BIGINT, request_key VARCHAR NOT NULL, note VARCHAR,
    expected VARCHAR NOT NULL, passed BOOLEAN NOT NULL, invalid BOOLEAN NOT NULL);
CREATE TABLE cells (
    source VARCHAR NOT NULL, model VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    test VARCHAR NOT NULL, serialization VARCHAR, seed UBIGINT NOT NULL, run_id BIGINT,
    passed BOOLEAN NOT NULL, score DOUBLE NOT NULL, trials UBIGINT NOT NULL,
    passed_trials UBIGINT NOT NULL, invalid_trials UBIGINT NOT NULL, skipped VARCHAR);
";

/// Writes `requests.parquet`, `responses.parquet`, `trials.parquet` and `cells.parquet`
/// into `dir` (created when missing; files of those names are replaced). Keys are hex
/// strings; `serialization` is null for tests without rows; `expected` and `params` are
/// JSON text.
pub fn export_parquet(store: &Store, dir: &Path) -> Result<Vec<ExportedFile>> {
    std::fs::create_dir_all(dir).map_err(|e| {
        anyhow::anyhow!("cannot create {}: {e}; pass another folder", dir.display())
    })?;
    let conn = export_connection()?;
    conn.execute_batch(TABLES)
        .doing("creating the export tables")?;
    load(store, &conn)?;
    let mut written = Vec::new();
    for table in ["requests", "responses", "trials", "cells"] {
        let path = dir.join(format!("{table}.parquet"));
        let quoted = path.to_string_lossy().replace('\'', "''");
        conn.execute_batch(&format!(
            "COPY {table} TO '{quoted}' (FORMAT parquet, COMPRESSION zstd)"
        ))
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        let rows: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .doing("counting exported rows")?;
        written.push(ExportedFile {
            table,
            path,
            rows: rows as u64,
        });
    }
    Ok(written)
}

/// An in-memory DuckDB for writing files: external access stays on (COPY writes files);
/// extensions are never fetched.
fn export_connection() -> Result<Connection> {
    let config = Config::default()
        .with("autoinstall_known_extensions", "false")
        .and_then(|c| c.with("autoload_known_extensions", "false"))
        .doing("configuring the export database")?;
    let conn =
        Connection::open_in_memory_with_flags(config).doing("opening an in-memory database")?;
    Ok(conn)
}

/// Converts a CSV file with a header to Parquet (DuckDB's CSV reader, column types
/// sniffed), for exports that write CSV first (`tabcontam rows --out x.parquet`).
pub fn csv_to_parquet(csv: &Path, parquet: &Path) -> Result<()> {
    let conn = export_connection()?;
    let quote = |p: &Path| p.to_string_lossy().replace('\'', "''");
    conn.execute_batch(&format!(
        "COPY (SELECT * FROM read_csv('{}', header = true)) TO '{}' (FORMAT parquet, COMPRESSION zstd)",
        quote(csv),
        quote(parquet)
    ))
    .map_err(|e| anyhow::anyhow!("writing {}: {e}", parquet.display()))?;
    Ok(())
}

fn load(store: &Store, conn: &Connection) -> Result<()> {
    let mut failed: Option<duckdb::Error> = None;
    {
        let mut appender = conn.appender("requests").doing("loading requests")?;
        store.for_each_request(|key, request| {
            if failed.is_some() {
                return;
            }
            let p = &request.params;
            let params_json = serde_json::to_string(p).expect("plain data serializes");
            if let Err(e) = appender.append_row(params![
                key.to_hex(),
                request.model.backend.id(),
                request.model.model,
                request.model.revision,
                match request.api {
                    ApiMode::Completions => "completions",
                    ApiMode::Chat => "chat",
                },
                request.prompt,
                p.max_tokens,
                p.temperature,
                p.top_p,
                p.seed,
                params_json,
                request.sample,
            ]) {
                failed = Some(e);
            }
        })?;
        if let Some(e) = failed.take() {
            return Err(e).doing("loading requests");
        }
        appender.flush().doing("loading requests")?;
    }
    {
        let mut appender = conn.appender("responses").doing("loading responses")?;
        store.for_each_response(|key, response, created_at| {
            if failed.is_some() {
                return;
            }
            if let Err(e) = appender.append_row(params![
                key.to_hex(),
                response.text,
                response.finish_reason,
                response.prompt_tokens,
                response.completion_tokens,
                response.latency_ms,
                created_at,
                response.served_model,
                response.served_fingerprint,
            ]) {
                failed = Some(e);
            }
        })?;
        if let Some(e) = failed.take() {
            return Err(e).doing("loading responses");
        }
        appender.flush().doing("loading responses")?;
    }
    {
        let mut appender = conn.appender("trials").doing("loading trials")?;
        for t in store.trials()? {
            let expected = serde_json::to_string(&t.expected).expect("plain data serializes");
            appender
                .append_row(params![
                    t.model,
                    t.dataset,
                    t.test.id(),
                    t.serialization.filter(|s| s != NO_SERIALIZATION),
                    t.seed,
                    t.sample,
                    t.trial,
                    t.run_id.map(|r| r.0),
                    t.request_key.to_hex(),
                    t.note,
                    expected,
                    t.verdict.passed,
                    t.verdict.invalid,
                ])
                .doing("loading trials")?;
        }
        appender.flush().doing("loading trials")?;
    }
    {
        let mut appender = conn.appender("cells").doing("loading cells")?;
        for c in store.cells()? {
            appender
                .append_row(params![
                    c.source,
                    c.model,
                    c.dataset,
                    c.test.id(),
                    c.serialization.filter(|s| s != NO_SERIALIZATION),
                    c.seed,
                    c.run_id.map(|r| r.0),
                    c.result.passed,
                    c.result.score,
                    c.result.trials as u64,
                    c.result.passed_trials as u64,
                    c.result.invalid_trials as u64,
                    c.skipped,
                ])
                .doing("loading cells")?;
        }
        appender.flush().doing("loading cells")?;
    }
    Ok(())
}
