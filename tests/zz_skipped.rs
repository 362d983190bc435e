//! The end-of-run summary of skipped tests. `cargo test` runs integration-test binaries in
//! name order, so this one (`zz_`) runs after every other; it prints the skips that the
//! binaries of the same `cargo test` recorded (see `support/skip.rs`) and clears them.
//! In CI (`TABCONTAM_CI=1`) nothing is skipped: a missing input fails its test.

#[path = "support/skip.rs"]
mod skip;

use std::io::Write;
use std::time::{Duration, SystemTime};

#[test]
fn skipped_tests_of_this_run() {
    let path = skip::record_file(skip::parent_pid());
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    forget_old_records();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let mut stderr = std::io::stderr().lock();
    if lines.is_empty() {
        let _ = writeln!(stderr, "\nskipped tests in this run: none");
        return;
    }
    let _ = writeln!(
        stderr,
        "\nskipped tests in this run: {} (their inputs are missing; .ci/run installs them, and \
         with TABCONTAM_CI=1 they fail instead)",
        lines.len()
    );
    for line in lines {
        let _ = writeln!(stderr, "  {line}");
    }
}

/// Records of runs that never reached this binary (a failure stops `cargo test` early, or
/// a single test binary was run by hand) are dropped after a day.
fn forget_old_records() {
    let Ok(entries) = std::fs::read_dir(skip::skips_dir()) else {
        return;
    };
    let day_ago = SystemTime::now() - Duration::from_secs(24 * 3600);
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| modified < day_ago);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
