//! The one rule for tests whose inputs may be absent (report tools, llama-server, PyTorch's
//! tiny models, the SmolLM2 file, the paper's files and parity records): outside CI such a
//! test is *skipped* with a line that `cargo test` shows; in CI (`TABCONTAM_CI=1`, set by
//! `.ci/run`, which installs every input first) it fails.
//!
//! Include it with `#[path = "support/skip.rs"] mod skip;` and write the check as
//!
//! ```ignore
//! let Some(dir) = skip::require(skip::shared_dir().join("parity"), |d| d.join("algorithm1.jsonl").is_file(),
//!     "the parity records are not there (../shared beside the checkout)") else { return };
//! ```
//!
//! libtest captures `eprintln!` of passing tests, so the notice is written to the process's
//! stderr directly (not captured), and recorded for `tests/zz_skipped.rs`, which runs last
//! in `cargo test` and prints every skip of the run once more.

#![allow(dead_code)] // each test binary uses a different part

use std::io::Write;
use std::path::{Path, PathBuf};

/// Set to `1` by `.ci/run`: a missing input fails the test instead of skipping it.
pub const CI_ENV: &str = "TABCONTAM_CI";
/// Older names of [`CI_ENV`], still honoured.
const CI_ALIASES: &[&str] = &[
    "TABCONTAM_REQUIRE_REAL_SERVER",
    "TABCONTAM_REQUIRE_REPORT_TOOLS",
];

/// True when a missing input must fail the test (CI).
pub fn in_ci() -> bool {
    std::iter::once(CI_ENV)
        .chain(CI_ALIASES.iter().copied())
        .any(|var| std::env::var(var).is_ok_and(|v| v == "1"))
}

/// Skips the calling test (the caller then returns): in CI, panics with `why`; otherwise
/// prints `SKIP: <binary>::<test>: <why>` where `cargo test` shows it, and records it for
/// the end-of-run summary.
pub fn skip(why: impl std::fmt::Display) {
    let test = test_name();
    if in_ci() {
        panic!(
            "{test}: {why}; {CI_ENV}=1 (CI) requires this input, so the test fails instead of skipping"
        );
    }
    let line = format!("SKIP: {test}: {why}");
    // Straight to the process's stderr: libtest's capture only intercepts the print macros.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    record(&line);
}

/// `Some(value)` when `present(&value)`, else [`skip`]s with `why` and gives `None`.
pub fn require<T>(
    value: T,
    present: impl FnOnce(&T) -> bool,
    why: impl std::fmt::Display,
) -> Option<T> {
    if present(&value) {
        Some(value)
    } else {
        skip(why);
        None
    }
}

/// The first of `candidates` found on `PATH`, or `None` after a [`skip`].
pub fn tool(candidates: &[&str], install: &str) -> Option<PathBuf> {
    let found = candidates.iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        skip(format!(
            "{} not found on PATH (install with {install})",
            candidates.join(" / ")
        ));
    }
    found
}

/// `$TABCONTAM_SHARED_DIR`, else `../shared` beside the checkout: the paper's files and
/// the parity records, never committed (CI has the folder beside the clone).
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("TABCONTAM_SHARED_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    }
}

/// `$TABCONTAM_TEST_ASSETS`, else `~/.cache/tabcontam-test-assets`: what
/// `scripts/ci-install-*.sh` install (llama-server, models, the PyTorch environment).
pub fn assets_dir() -> PathBuf {
    match std::env::var_os("TABCONTAM_TEST_ASSETS").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/tabcontam-test-assets"),
    }
}

/// Where this `cargo test` run's skips are recorded: one file per cargo process (the
/// parent of every test binary it runs), so runs never mix.
pub fn record_file(cargo_pid: u32) -> PathBuf {
    skips_dir().join(format!("{cargo_pid}.txt"))
}

/// The folder of [`record_file`]s, inside the target directory.
pub fn skips_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("tabcontam-skips")
}

/// The process that started this test binary (`cargo` under `cargo test`).
pub fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    unsafe { libc::getppid() as u32 }
}

fn record(line: &str) {
    let path = record_file(parent_pid());
    let _ = std::fs::create_dir_all(skips_dir());
    // One short append per line: lines of concurrent tests do not interleave.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// `binary::test`: libtest names each test's thread after the test (`main` when tests run
/// one at a time on the main thread).
fn test_name() -> String {
    let binary = std::env::args()
        .next()
        .map(|arg0| {
            let stem = Path::new(&arg0)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            // `local_inference-0123abcd` → `local_inference`
            match stem.rsplit_once('-') {
                Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => {
                    name.to_string()
                }
                _ => stem,
            }
        })
        .unwrap_or_default();
    match std::thread::current().name() {
        Some(name) if name != "main" => format!("{binary}::{name}"),
        _ => binary,
    }
}
