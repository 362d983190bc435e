//! The CLI test harness of every integration test that runs the binary: a temporary folder
//! (holding the user's `TABCONTAM_HOME`, the cache and the test's files), a tokio runtime
//! that serves loopback mock servers while the binary runs, the binary itself with the
//! caller's `TABCONTAM_*` settings removed, and the checks of its outcome that show stdout
//! and stderr when they fail.
//!
//! Include it with `#[path = "support/cli_env.rs"] mod cli_env;` beside
//! `#[path = "support/mock_server.rs"] mod mock_server;` (the servers it serves).
//! `TABCONTAM_KEEP_TEST_DIR=1` keeps the temporary folder (models, checkpoints, caches) for
//! a look.

#![allow(dead_code)] // each test binary uses a different part

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::mock_server::{MockConfig, MockServer};

pub struct Env {
    pub dir: tempfile::TempDir,
    /// Started by the first mock server: a test that starts none (an async test among
    /// them, where a runtime may not be dropped) never has one.
    runtime: OnceLock<tokio::runtime::Runtime>,
    /// Extra environment variables of every command (e.g. a test API key).
    vars: Vec<(OsString, OsString)>,
    /// Where the commands run (the test's own directory when `None`).
    current_dir: Option<PathBuf>,
}

impl Drop for Env {
    fn drop(&mut self) {
        if std::env::var_os("TABCONTAM_KEEP_TEST_DIR").is_some() {
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
            eprintln!("kept {}", dir.keep().display());
        }
    }
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            runtime: OnceLock::new(),
            vars: Vec::new(),
            current_dir: None,
        }
    }

    /// Sets `name=value` for every command of this environment.
    pub fn var(mut self, name: &str, value: impl AsRef<OsStr>) -> Self {
        self.vars.push((name.into(), value.as_ref().into()));
        self
    }

    /// Commands that take `--cache` use [`Env::cache`] without it (`TABCONTAM_CACHE`).
    pub fn default_cache(self) -> Self {
        let cache = self.cache();
        self.var("TABCONTAM_CACHE", cache)
    }

    /// Runs every command in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// The cache file commands of a test share.
    pub fn cache(&self) -> PathBuf {
        self.path("cache/tabcontam.sqlite")
    }

    /// The user's folder (`TABCONTAM_HOME`): imported datasets under `datasets/`.
    pub fn home(&self) -> PathBuf {
        self.path("home")
    }

    /// The runtime that serves this environment's mock servers.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .get_or_init(|| tokio::runtime::Runtime::new().unwrap())
    }

    /// A mock server, served by this environment's runtime until it is dropped.
    pub fn server(&self, config: MockConfig) -> MockServer {
        self.runtime().block_on(MockServer::start(config))
    }

    /// `name` inside the temporary folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `contents` to the file `name` and returns its path.
    pub fn file(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// Writes a spec file named `name` and returns its path.
    pub fn spec(&self, name: &str, body: &str) -> PathBuf {
        self.file(name, body)
    }

    /// The binary with `args`, `TABCONTAM_HOME` in the temporary folder and no data folder
    /// (`TABCONTAM_DATA_DIR`, `XDG_DATA_HOME`), cache or progress settings inherited from
    /// the caller's environment; this environment's variables and directory on top.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .env("TABCONTAM_HOME", self.home())
            .env_remove("TABCONTAM_DATA_DIR")
            .env_remove("XDG_DATA_HOME")
            .env_remove("TABCONTAM_CACHE")
            .env_remove("TABCONTAM_PROGRESS_INTERVAL")
            .envs(self.vars.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// Runs `args` to the end; the caller checks the outcome.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs `args`, asserts that they succeeded (see [`succeeded`]) and returns stdout.
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let output = self.run(args);
        let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
        assert!(
            output.status.success(),
            "tabcontam {args:?}: {}",
            describe(&output)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs `args`, asserts that they succeeded and returns stdout as JSON.
    pub fn json<S: AsRef<OsStr>>(&self, args: &[S]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }
}

/// The CLI under test; `TABCONTAM_TEST_BIN` points elsewhere when a target directory shared
/// by several checkouts holds another checkout's uplifted binary.
pub fn binary() -> PathBuf {
    std::env::var_os("TABCONTAM_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tabcontam")))
}

/// stdout and stderr as text, for assertion messages.
pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The exit status, stdout and stderr, for assertion messages.
pub fn describe(output: &Output) -> String {
    let (stdout, stderr) = text(output);
    format!(
        "status {:?}\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    )
}

/// Asserts that the command succeeded, showing its status, stdout and stderr when it did
/// not; returns stdout.
pub fn succeeded(output: &Output) -> String {
    assert!(output.status.success(), "{}", describe(output));
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// stdout as JSON.
pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", text(output)))
}

/// Asserts the shape of a user's error: exit code 1, exactly one line on stderr holding
/// every needle, no panic. Returns that line.
pub fn one_line_error(output: &Output, needles: &[&str]) -> String {
    let (stdout, stderr) = text(output);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "one error line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "`{needle}` missing from: {stderr}");
    }
    line.to_string()
}
