//! The CLI test harness shared by the integration tests: a temporary folder (also the
//! user's `TABCONTAM_HOME`), a tokio runtime that serves loopback mock servers while the
//! binary runs, and the binary itself with the caller's `TABCONTAM_*` settings removed.
//!
//! Include it with `#[path = "support/cli_env.rs"] mod cli_env;` (after `mock_server`).

#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::mock_server::{MockConfig, MockServer};

pub struct Env {
    pub dir: tempfile::TempDir,
    pub runtime: tokio::runtime::Runtime,
    /// Extra environment variables of every command (e.g. a test API key).
    vars: Vec<(String, String)>,
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            runtime: tokio::runtime::Runtime::new().unwrap(),
            vars: Vec::new(),
        }
    }

    /// Sets `name=value` for every command of this environment.
    pub fn var(mut self, name: &str, value: &str) -> Self {
        self.vars.push((name.into(), value.into()));
        self
    }

    /// The cache file commands of a test share.
    pub fn cache(&self) -> PathBuf {
        self.path("cache/tabcontam.sqlite")
    }

    /// A mock server, served by this environment's runtime until it is dropped.
    pub fn server(&self, config: MockConfig) -> MockServer {
        self.runtime.block_on(MockServer::start(config))
    }

    /// `name` inside the temporary folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a spec file named `name` and returns its path.
    pub fn spec(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, body).unwrap();
        path
    }

    /// The binary with `args`, `TABCONTAM_HOME` in the temporary folder and no data
    /// folder, cache or progress settings inherited from the caller's environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .env("TABCONTAM_HOME", self.path("home"))
            .env_remove("TABCONTAM_DATA_DIR")
            .env_remove("TABCONTAM_CACHE")
            .env_remove("TABCONTAM_PROGRESS_INTERVAL")
            .envs(self.vars.iter().map(|(k, v)| (k, v)));
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
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
