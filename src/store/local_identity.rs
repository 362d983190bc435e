//! Migration 8's Rust step: every local identity becomes its weights' digest alone
//! ([`LOCAL_WEIGHTS_MODEL`]), with each request, response, failure, trial and scored text
//! moved to the key it has under that identity. See `schema/sqlite/0008_*.sql`.

use rusqlite::{OptionalExtension, Transaction};

use crate::request::{
    ApiMode, BackendKind, GenerationParams, LOCAL_WEIGHTS_MODEL, ModelIdentity, Request,
    RequestKey, ScoreRequest,
};

/// Rewrites every local identity whose model name is not [`LOCAL_WEIGHTS_MODEL`]. Runs inside
/// the migration's transaction: all of it happens or none.
pub(crate) fn rewrite_local_identities(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    let local = BackendKind::Local.id();
    let old: Vec<(i64, String, String)> = tx
        .prepare("SELECT id, model, revision FROM identities WHERE backend = ?1 AND model <> ?2 ORDER BY id")?
        .query_map((local, LOCAL_WEIGHTS_MODEL), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    for (old_id, old_model, revision) in old {
        let before = ModelIdentity {
            backend: BackendKind::Local,
            model: old_model,
            revision: revision.clone(),
        };
        let after = ModelIdentity::local(&revision);
        let new_id = identity_id(tx, &after)?;
        move_requests(tx, old_id, &before, new_id, &after)?;
        move_scores(tx, old_id, new_id, &after)?;
        tx.execute("DELETE FROM identities WHERE id = ?1", [old_id])?;
    }
    tx.execute(
        "UPDATE models SET model = ?2 WHERE backend = ?1",
        (local, LOCAL_WEIGHTS_MODEL),
    )?;
    Ok(())
}

fn identity_id(tx: &Transaction<'_>, identity: &ModelIdentity) -> rusqlite::Result<i64> {
    let found = tx
        .query_row(
            "SELECT id FROM identities WHERE backend = ?1 AND model = ?2 AND revision = ?3",
            (identity.backend.id(), &identity.model, &identity.revision),
            |r| r.get(0),
        )
        .optional()?;
    match found {
        Some(id) => Ok(id),
        None => tx.query_row(
            "INSERT INTO identities (backend, model, revision) VALUES (?1, ?2, ?3) RETURNING id",
            (identity.backend.id(), &identity.model, &identity.revision),
            |r| r.get(0),
        ),
    }
}

/// One stored request as its key was computed from it.
struct StoredRequest {
    key: [u8; 32],
    api: String,
    prompt: String,
    params: String,
    sample: u32,
}

fn move_requests(
    tx: &Transaction<'_>,
    old_id: i64,
    before: &ModelIdentity,
    new_id: i64,
    after: &ModelIdentity,
) -> rusqlite::Result<()> {
    let stored: Vec<StoredRequest> = tx
        .prepare(
            "SELECT r.key, r.api, p.text, r.params, r.sample
             FROM requests r JOIN prompts p ON p.id = r.prompt_id WHERE r.identity_id = ?1",
        )?
        .query_map([old_id], |r| {
            Ok(StoredRequest {
                key: r.get(0)?,
                api: r.get(1)?,
                prompt: r.get(2)?,
                params: r.get(3)?,
                sample: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    for row in stored {
        let corrupt = |what: String| {
            rusqlite::Error::FromSqlConversionFailure(
                0,
                rusqlite::types::Type::Blob,
                format!("request {}: {what}", hex(&row.key)).into(),
            )
        };
        let api = match row.api.as_str() {
            "completions" => ApiMode::Completions,
            "chat" => ApiMode::Chat,
            other => return Err(corrupt(format!("unknown api `{other}`"))),
        };
        let params: GenerationParams = serde_json::from_str(&row.params)
            .map_err(|e| corrupt(format!("unreadable params ({e})")))?;
        let mut request = Request {
            model: before.clone(),
            api,
            prompt: row.prompt,
            params,
            sample: row.sample,
        };
        // A key that does not recompute was written by something else: leave it alone
        // rather than guess.
        if RequestKey::of(&request).0 != row.key {
            return Err(corrupt(
                "its key does not match its fields; restore the cache from a backup".into(),
            ));
        }
        request.model = after.clone();
        let new_key = RequestKey::of(&request).0;
        tx.execute(
            "INSERT OR IGNORE INTO requests (key, identity_id, api, prompt_id, params, sample)
             SELECT ?1, ?2, api, prompt_id, params, sample FROM requests WHERE key = ?3",
            (new_key, new_id, row.key),
        )?;
        // Two paths of one file may both hold an answer to this request: the first stored
        // (the lower response id) stays, as it would have in one cache.
        let response_id = |key: [u8; 32]| -> rusqlite::Result<Option<i64>> {
            tx.query_row("SELECT id FROM responses WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()
        };
        if let (Some(moving), Some(present)) = (response_id(row.key)?, response_id(new_key)?) {
            let dropped = if moving < present { new_key } else { row.key };
            tx.execute("DELETE FROM responses WHERE key = ?1", [dropped])?;
        }
        tx.execute(
            "UPDATE responses SET key = ?1, identity_id = ?2 WHERE key = ?3",
            (new_key, new_id, row.key),
        )?;
        tx.execute(
            "UPDATE failures SET request_key = ?1 WHERE request_key = ?2",
            (new_key, row.key),
        )?;
        tx.execute(
            "UPDATE trials SET request_key = ?1 WHERE request_key = ?2",
            (new_key, row.key),
        )?;
        tx.execute("DELETE FROM requests WHERE key = ?1", [row.key])?;
    }
    Ok(())
}

fn move_scores(
    tx: &Transaction<'_>,
    old_id: i64,
    new_id: i64,
    after: &ModelIdentity,
) -> rusqlite::Result<()> {
    let scored: Vec<([u8; 32], String)> = tx
        .prepare("SELECT key, text FROM logprobs WHERE identity_id = ?1")?
        .query_map([old_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (old_key, text) in scored {
        let new_key = ScoreRequest {
            model: after.clone(),
            text,
        }
        .key()
        .0;
        let present: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM logprobs WHERE key = ?1)",
            [new_key],
            |r| r.get(0),
        )?;
        if present {
            tx.execute("DELETE FROM logprobs WHERE key = ?1", [old_key])?;
        } else {
            tx.execute(
                "UPDATE logprobs SET key = ?1, identity_id = ?2 WHERE key = ?3",
                (new_key, new_id, old_key),
            )?;
        }
    }
    Ok(())
}

fn hex(key: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*key).to_hex().to_string()
}
