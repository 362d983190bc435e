//! Finds a model's files on disk (plain directory, Hugging Face cache layout, or one GGUF
//! file) and computes the weights digest that identifies it in the cache.

use std::path::{Path, PathBuf};

use super::error::LocalError;

/// The files of one model, resolved from the path the user gave.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// The directory the files were found in (the snapshot folder for the HF cache layout).
    pub dir: PathBuf,
    pub format: WeightFormat,
    /// `tokenizer.json` when present (GGUF files may also carry their own tokenizer).
    pub tokenizer: Option<PathBuf>,
    /// `generation_config.json` when present (extra end-of-sequence ids).
    pub generation_config: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub enum WeightFormat {
    Safetensors {
        config: PathBuf,
        /// Every shard, in name order.
        shards: Vec<PathBuf>,
    },
    Gguf(PathBuf),
}

impl ModelFiles {
    /// Every file whose bytes decide the model's answers, in a fixed order.
    pub fn identity_files(&self) -> Vec<PathBuf> {
        let mut files = match &self.format {
            WeightFormat::Safetensors { config, shards } => {
                let mut files = vec![config.clone()];
                files.extend(shards.iter().cloned());
                files
            }
            WeightFormat::Gguf(path) => vec![path.clone()],
        };
        files.extend(self.tokenizer.iter().cloned());
        files.extend(self.generation_config.iter().cloned());
        files
    }

    /// The file a weight error should name (the first shard or the GGUF file).
    pub fn weights_path(&self) -> &Path {
        match &self.format {
            WeightFormat::Safetensors { shards, .. } => &shards[0],
            WeightFormat::Gguf(path) => path,
        }
    }

    /// Resolves `path`: a `.gguf` file, a directory of safetensors (or holding one GGUF),
    /// or a Hugging Face cache folder `models--org--name` (its `refs/main` snapshot, else
    /// the only or newest one).
    pub fn locate(path: &Path) -> Result<ModelFiles, LocalError> {
        if !path.exists() {
            return Err(LocalError::NotFound(path.to_path_buf()));
        }
        if path.is_file() {
            let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
            if is_gguf_name(path) {
                return Ok(Self::with_side_files(
                    dir,
                    WeightFormat::Gguf(path.to_path_buf()),
                ));
            }
            if path.extension().is_some_and(|e| e == "safetensors") {
                return Self::locate(&dir);
            }
            return Err(LocalError::NoWeights {
                dir: path.to_path_buf(),
            });
        }
        let dir = resolve_hf_cache_snapshot(path)?;
        let config = dir.join("config.json");
        let safetensors = safetensors_shards(&dir)?;
        if config.is_file() && !safetensors.is_empty() {
            return Ok(Self::with_side_files(
                dir,
                WeightFormat::Safetensors {
                    config,
                    shards: safetensors,
                },
            ));
        }
        let ggufs = list_files(&dir, is_gguf_name)?;
        match ggufs.len() {
            0 if !safetensors.is_empty() => Err(LocalError::MissingConfig { path: config }),
            0 if config.is_file() => Err(LocalError::MissingWeightFile {
                path: dir.join("model.safetensors"),
                detail: format!("{} has config.json but no *.safetensors", dir.display()),
            }),
            0 => Err(LocalError::NoWeights { dir }),
            1 => {
                let gguf = ggufs.into_iter().next().expect("one GGUF file");
                Ok(Self::with_side_files(dir, WeightFormat::Gguf(gguf)))
            }
            _ => Err(LocalError::SeveralGguf {
                dir,
                names: ggufs
                    .iter()
                    .filter_map(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    fn with_side_files(dir: PathBuf, format: WeightFormat) -> ModelFiles {
        let existing = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        ModelFiles {
            tokenizer: existing("tokenizer.json"),
            generation_config: existing("generation_config.json"),
            format,
            dir,
        }
    }
}

fn is_gguf_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

fn list_files(dir: &Path, keep: impl Fn(&Path) -> bool) -> Result<Vec<PathBuf>, LocalError> {
    let entries = std::fs::read_dir(dir).map_err(|e| LocalError::io(dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| LocalError::io(dir, e))?.path();
        // The HF cache stores files as symlinks into blobs/: follow them.
        if keep(&path) && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The shards named by `model.safetensors.index.json` (all must exist), else every
/// `*.safetensors` file of the directory.
fn safetensors_shards(dir: &Path) -> Result<Vec<PathBuf>, LocalError> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| LocalError::io(&index, e))?;
        let parsed: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| LocalError::BadConfig {
                path: index.clone(),
                detail: e.to_string(),
            })?;
        let mut names: Vec<String> = parsed
            .get("weight_map")
            .and_then(|m| m.as_object())
            .map(|m| {
                m.values()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names.dedup();
        let mut shards = Vec::with_capacity(names.len());
        for name in names {
            let shard = dir.join(&name);
            if !shard.is_file() {
                return Err(LocalError::MissingWeightFile {
                    path: shard,
                    detail: format!("listed in {}", index.display()),
                });
            }
            shards.push(shard);
        }
        return Ok(shards);
    }
    list_files(dir, |p| p.extension().is_some_and(|e| e == "safetensors"))
}

/// `models--org--name/` → `models--org--name/snapshots/<rev>/`; any other directory as is.
fn resolve_hf_cache_snapshot(dir: &Path) -> Result<PathBuf, LocalError> {
    let snapshots = dir.join("snapshots");
    if !snapshots.is_dir() {
        return Ok(dir.to_path_buf());
    }
    if let Ok(rev) = std::fs::read_to_string(dir.join("refs").join("main")) {
        let candidate = snapshots.join(rev.trim());
        if candidate.is_dir() {
            return Ok(candidate);
        }
    }
    let entries = std::fs::read_dir(&snapshots).map_err(|e| LocalError::io(&snapshots, e))?;
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in entries {
        let entry = entry.map_err(|e| LocalError::io(&snapshots, e))?;
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let modified = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
            newest = Some((modified, path));
        }
    }
    newest
        .map(|(_, path)| path)
        .ok_or_else(|| LocalError::NoWeights { dir: snapshots })
}

/// blake3 over the bytes of every file that decides the model's answers (weights, config,
/// tokenizer, generation config), each file hashed with memory mapping on all cores and
/// bound to its name. Nothing is cached on disk: a changed checkpoint always gets a new
/// digest, so it never reuses old answers.
pub fn weights_digest(paths: &[PathBuf]) -> Result<String, LocalError> {
    let mut outer = blake3::Hasher::new();
    outer.update(b"tabcontam-weights-v1\0");
    for path in paths {
        let mut file_hasher = blake3::Hasher::new();
        file_hasher
            .update_mmap_rayon(path)
            .map_err(|e| LocalError::io(path, e))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        outer.update(name.as_bytes());
        outer.update(b"\0");
        outer.update(file_hasher.finalize().as_bytes());
    }
    Ok(format!("blake3:{}", outer.finalize().to_hex()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_changes_with_any_byte_and_ignores_directory() {
        let dir = tempfile::tempdir().unwrap();
        let weights = dir.path().join("model.safetensors");
        std::fs::write(&weights, b"weights-a").unwrap();
        let first = weights_digest(std::slice::from_ref(&weights)).unwrap();
        std::fs::write(&weights, b"weights-b").unwrap();
        let second = weights_digest(std::slice::from_ref(&weights)).unwrap();
        assert_ne!(first, second);
        let other = tempfile::tempdir().unwrap();
        let moved = other.path().join("model.safetensors");
        std::fs::write(&moved, b"weights-b").unwrap();
        assert_eq!(weights_digest(&[moved]).unwrap(), second);
        assert!(second.starts_with("blake3:"));
    }

    #[test]
    fn hf_cache_layout_resolves_the_main_snapshot() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("models--org--tiny");
        let snapshot = repo.join("snapshots").join("abc123");
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join("main"), "abc123\n").unwrap();
        std::fs::write(snapshot.join("config.json"), "{}").unwrap();
        std::fs::write(snapshot.join("model.safetensors"), "").unwrap();
        let files = ModelFiles::locate(&repo).unwrap();
        assert_eq!(files.dir, snapshot);
        assert!(matches!(files.format, WeightFormat::Safetensors { .. }));
    }

    #[test]
    fn safetensors_without_config_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.safetensors"), "").unwrap();
        let err = ModelFiles::locate(dir.path()).unwrap_err().to_string();
        assert!(err.contains("config.json is missing"), "{err}");
    }

    #[test]
    fn missing_shard_of_an_index_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            r#"{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("model-00001-of-00002.safetensors"), "").unwrap();
        let err = ModelFiles::locate(dir.path()).unwrap_err().to_string();
        assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
    }
}
