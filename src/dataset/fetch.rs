//! Fetching a dataset file over HTTPS (plain HTTP only to this machine's test servers),
//! checked against its descriptor before anything is stored.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::catalog::{self, Catalog};
use super::csv;
use super::descriptor::{DataFile, Descriptor};
use super::import::write_atomically;

/// Downloads larger than this are refused (the paper's largest file is 4 MB).
const MAX_DOWNLOAD_BYTES: u64 = 1 << 30;

/// What `fetch` stored.
#[derive(Debug)]
pub struct Fetched {
    pub dataset: String,
    pub variant: String,
    pub bytes: usize,
    /// Whether the descriptor recorded a checksum the download matched (else it loaded).
    pub checksum_verified: bool,
    pub path: PathBuf,
}

/// Downloads dataset `name` (from its descriptor's URL, or `url`) into `data_dir` (else the
/// user data directory), checks it against the recorded checksum (or, without one, that it
/// loads as the dataset) and writes it atomically: a failed check stores nothing.
pub fn fetch(name: &str, data_dir: Option<&Path>, url: Option<&str>) -> anyhow::Result<Fetched> {
    let catalog = Catalog::open(data_dir)?;
    let descriptor = catalog.find(name)?;
    let dest_dir = match data_dir {
        Some(dir) => dir.to_path_buf(),
        None => catalog::user_datasets_dir().ok_or_else(|| {
            anyhow::anyhow!(
                "no user data directory: set TABCONTAM_HOME (or HOME), or pass --data-dir DIR"
            )
        })?,
    };
    let (url, planned) = match url {
        Some(url) => (url.to_string(), None),
        None => {
            let Some(file) = descriptor.files.iter().find(|f| f.url.is_some()) else {
                anyhow::bail!("{}", manual_download_hint(descriptor, &dest_dir));
            };
            (file.url.clone().unwrap_or_default(), Some(file))
        }
    };
    let parsed = check_url(&url)?;
    let bytes = download(&parsed)?;
    let digest = catalog::blake3_hex(&bytes);

    // Which variant did we get? The planned one must match its checksum; with --url, the
    // variant whose checksum matches, else one without a checksum named like the URL's file.
    let by_digest = |f: &&DataFile| {
        f.blake3
            .as_deref()
            .is_some_and(|d| d.eq_ignore_ascii_case(&digest))
    };
    let url_file_name = parsed
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or("")
        .to_string();
    let chosen: Option<&DataFile> = match planned {
        Some(f) => (f.blake3.is_none() || by_digest(&f)).then_some(f),
        None => descriptor.files.iter().find(by_digest).or_else(|| {
            descriptor
                .files
                .iter()
                .find(|f| f.blake3.is_none() && f.file == url_file_name)
        }),
    };
    let Some(file) = chosen else {
        let expected: Vec<String> = descriptor
            .files
            .iter()
            .filter(|f| planned.is_none_or(|p| std::ptr::eq(p, *f)))
            .filter_map(|f| f.blake3.as_ref().map(|d| format!("{} {d}", f.file)))
            .collect();
        if expected.is_empty() {
            anyhow::bail!(
                "{url}: dataset \"{}\" records no checksum for a file named {url_file_name:?}; nothing was stored (its files are {})",
                descriptor.id,
                catalog::file_names(descriptor)
            );
        }
        anyhow::bail!(
            "{url}: checksum mismatch: the download has blake3 {digest}, dataset \"{}\" expects {}; nothing was stored (the server may hold another version of the file)",
            descriptor.id,
            expected.join(" or ")
        );
    };
    // A file without a recorded checksum must at least load as this dataset.
    if file.blake3.is_none() {
        let table = csv::parse_table(&bytes, Path::new(&url), &file.csv_options())?;
        descriptor.resolve(file, table)?;
    }
    let path = dest_dir.join(&file.file);
    write_atomically(&path, &bytes)?;
    Ok(Fetched {
        dataset: descriptor.id.clone(),
        variant: file.variant.clone(),
        bytes: bytes.len(),
        checksum_verified: file.blake3.is_some(),
        path,
    })
}

/// What to do for datasets that cannot be downloaded automatically (Kaggle needs a login).
fn manual_download_hint(descriptor: &Descriptor, dest_dir: &Path) -> String {
    let options: Vec<String> = descriptor
        .files
        .iter()
        .map(|f| match &f.page {
            Some(page) => format!("{} from {page}", f.file),
            None => f.file.clone(),
        })
        .collect();
    format!(
        "dataset \"{}\" has no public download URL; download it yourself ({}) and save it in {} under that name, or pass --data-dir DIR to the folder that holds it",
        descriptor.id,
        options.join("; or "),
        dest_dir.display()
    )
}

/// HTTPS only, except plain HTTP to this machine (test servers).
fn check_url(url: &str) -> anyhow::Result<reqwest::Url> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|err| anyhow::anyhow!("{url}: not a valid URL ({err})"))?;
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if is_loopback(&parsed) => Ok(parsed),
        "http" => anyhow::bail!(
            "{url}: plain http:// is refused (only loopback test servers may use it); use https://"
        ),
        other => anyhow::bail!("{url}: unsupported scheme `{other}`; use https://"),
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or("");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// GETs the URL into memory (datasets are a few MB) on a current-thread runtime.
fn download(url: &reqwest::Url) -> anyhow::Result<Vec<u8>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the download runtime")?;
    runtime.block_on(async {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(30))
            .timeout(std::time::Duration::from_secs(600))
            .user_agent(concat!("tabcontam/", env!("CARGO_PKG_VERSION")));
        if is_loopback(url) {
            // A proxy from the environment must not intercept a local test server.
            builder = builder.no_proxy();
        }
        let client = builder.build().context("cannot build the HTTP client")?;
        let mut response = client.get(url.clone()).send().await.map_err(|err| network_error(url, &err))?;
        let status = response.status();
        if !status.is_success() {
            anyhow::bail!("{url}: the server answered HTTP {status}; check the URL");
        }
        if response.content_length().is_some_and(|n| n > MAX_DOWNLOAD_BYTES) {
            anyhow::bail!("{url}: the file is larger than {MAX_DOWNLOAD_BYTES} bytes; refusing to download it");
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| network_error(url, &err))? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > MAX_DOWNLOAD_BYTES {
                anyhow::bail!("{url}: the file is larger than {MAX_DOWNLOAD_BYTES} bytes; refusing to download it");
            }
        }
        Ok(bytes)
    })
}

/// One line naming the URL and the innermost cause (`Connection refused`, a DNS failure…).
fn network_error(url: &reqwest::Url, err: &reqwest::Error) -> anyhow::Error {
    let mut cause: &dyn std::error::Error = err;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let what = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "cannot connect"
    } else {
        "download failed"
    };
    anyhow::anyhow!("{url}: {what} ({cause}); check the URL and your network connection")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_accepted() {
        assert!(check_url("https://example.org/a.csv").is_ok());
        assert!(check_url("http://127.0.0.1:8080/a.csv").is_ok());
        assert!(check_url("http://[::1]:8080/a.csv").is_ok());
        assert!(check_url("http://localhost/a.csv").is_ok());
        let plain = check_url("http://example.org/a.csv")
            .unwrap_err()
            .to_string();
        assert!(plain.contains("use https://"), "{plain}");
        let ftp = check_url("ftp://example.org/a.csv")
            .unwrap_err()
            .to_string();
        assert!(ftp.contains("unsupported scheme `ftp`"), "{ftp}");
        let junk = check_url("not a url").unwrap_err().to_string();
        assert!(junk.contains("not a valid URL"), "{junk}");
    }

    #[test]
    fn a_download_from_a_closed_port_names_the_url_and_the_cause() {
        // A port just bound and released: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = check_url(&format!("http://127.0.0.1:{port}/x.csv")).unwrap();
        let err = download(&url).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("http://127.0.0.1:{port}/x.csv: cannot connect")),
            "{err}"
        );
    }
}
