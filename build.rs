//! Build script: finds the prebuilt DuckDB shared library that `src/analyze` links against
//! and bakes its folder into every binary's rpath, so `tabcontam`, tests and benches run
//! without `LD_LIBRARY_PATH`.
//!
//! Why not the `duckdb` crate's `bundled` feature: it compiles DuckDB's C++ (26–35 min on
//! 2 cores). `scripts/ci-install-duckdb.sh` fetches DuckDB's own build instead (seconds).
//! The `libduckdb-sys` build script, seeing no `DUCKDB_LIB_DIR`, only asks for `-lduckdb`;
//! the search path and rpath emitted here make that resolve.

use std::env;
use std::path::PathBuf;

/// The DuckDB release matching the `duckdb` crate's version in Cargo.toml (1.10506.x).
const DUCKDB_VERSION: &str = "1.5.6";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    println!("cargo:rerun-if-env-changed=TABCONTAM_DUCKDB_DIR");
    println!("cargo:rerun-if-env-changed=HOME");
    // Report templates are compiled in by askama; edits must rebuild.
    println!("cargo:rerun-if-changed=templates");

    // On a fresh machine the library is fetched once by the project's own script (npm
    // registry), so `cargo build` works with nothing installed by hand.
    let located = locate_libduckdb().or_else(|_| {
        let script = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default())
            .join("scripts/ci-install-duckdb.sh");
        println!(
            "cargo:warning=libduckdb.so not found; running {}",
            script.display()
        );
        let status = std::process::Command::new("bash").arg(&script).status();
        if !matches!(status, Ok(s) if s.success()) {
            println!("cargo:warning={} failed: {status:?}", script.display());
        }
        locate_libduckdb()
    });
    let dir = match located {
        Ok(dir) => dir,
        Err(looked_in) => {
            // A build-script panic prints this message as the build error.
            panic!(
                "libduckdb.so (DuckDB {DUCKDB_VERSION}) not found in {looked_in}.\n\
                 Run `bash scripts/ci-install-duckdb.sh` (fetches DuckDB's prebuilt library into \
                 ~/.cache/tabcontam-duckdb/{DUCKDB_VERSION}), or set DUCKDB_LIB_DIR to a folder \
                 holding DuckDB {DUCKDB_VERSION}'s libduckdb.so."
            );
        }
    };
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("libduckdb.so").display()
    );
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
