//! Build script: finds the prebuilt DuckDB shared library that `src/analyze` links against
//! and bakes its folder into every binary's rpath, so `tabcontam`, tests and benches run
//! without `LD_LIBRARY_PATH`.
//!
//! Why not the `duckdb` crate's `bundled` feature: it compiles DuckDB's C++ (26–35 min on
//! 2 cores). `scripts/ci-install-duckdb.sh` fetches DuckDB's own build instead (seconds);
//! this script only looks for it and fails with that instruction when it is missing.
//! The `libduckdb-sys` build script, seeing no `DUCKDB_LIB_DIR`, only asks for `-lduckdb`;
//! the search path and rpath emitted here make that resolve.

use std::env;
use std::path::PathBuf;

/// The DuckDB release matching the `duckdb` crate's version in Cargo.toml (1.10506.x).
const DUCKDB_VERSION: &str = "1.5.6";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Not `rerun-if-changed` on libduckdb.so itself: a library fetched after the first build
    // looks newer than it and would relink every binary on the next command. The folder is
    // keyed by DuckDB's version (a new version means editing DUCKDB_VERSION, which reruns
    // this script), so the variables that choose the folder are all that is tracked.
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    println!("cargo:rerun-if-env-changed=TABCONTAM_DUCKDB_DIR");
    println!("cargo:rerun-if-env-changed=HOME");
    // Report templates are compiled in by askama; edits must rebuild.
    println!("cargo:rerun-if-changed=templates");

    // A build script must not install anything (no package manager, no sudo): a missing
    // library is an error that says how to get it. A failed build script runs again on the
    // next build, so the build succeeds once the library is there.
    let dir = match locate_libduckdb() {
        Ok(dir) => dir,
        Err(looked_in) => {
            // Cargo shows a failed build script's stderr under the build error.
            eprintln!(
                "error: libduckdb.so (DuckDB {DUCKDB_VERSION}) not found in {looked_in}.\n\
                 Run `bash scripts/ci-install-duckdb.sh` once (fetches DuckDB's prebuilt library \
                 into ~/.cache/tabcontam-duckdb/{DUCKDB_VERSION}; needs npm), or set \
                 DUCKDB_LIB_DIR to a folder holding DuckDB {DUCKDB_VERSION}'s libduckdb.so, then \
                 build again."
            );
            std::process::exit(1);
        }
    };
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}

/// `DUCKDB_LIB_DIR`, else `TABCONTAM_DUCKDB_DIR`, else the install script's default folder.
fn locate_libduckdb() -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = ["DUCKDB_LIB_DIR", "TABCONTAM_DUCKDB_DIR"]
        .iter()
        .filter_map(|var| {
            env::var_os(var)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .chain(env::var_os("HOME").map(|home| {
            PathBuf::from(home)
                .join(".cache/tabcontam-duckdb")
                .join(DUCKDB_VERSION)
        }))
        .collect();
    candidates
        .iter()
        .find(|dir| dir.join("libduckdb.so").is_file())
        .cloned()
        .ok_or_else(|| {
            candidates
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
}
