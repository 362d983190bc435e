//! `tabcontam site`: analyzes the cache as `report` does and writes the static results site
//! (`report::site`) into the output folder, atomically.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use crate::cli::SiteArgs;
use crate::report::site;

pub fn run(args: SiteArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let cache = &args.cache.cache;
    let trials = args
        .trials
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let analysis = super::report::analyze_cache(
        cache,
        args.serialization.as_deref(),
        args.scoring.as_deref(),
        trials,
    )?;
    if analysis.series.is_empty() {
        anyhow::bail!(
            "{} holds no cells: nothing to show; run an experiment (`tabcontam run SPEC`) or import published results (`tabcontam import-results DIR`) first",
            cache.display()
        );
    }
    let files = site::render(
        &analysis,
        &site::Options {
            cache: cache.display().to_string(),
        },
    )?;
    site::write(&args.out, &files)?;
    let pages: Vec<_> = files.iter().filter(|f| f.name.ends_with(".html")).collect();
    let largest = pages.iter().max_by_key(|f| f.contents.len());
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} pages ({} models, {} datasets) from {} in {:.2} s; largest {}; open {}",
        pages.len(),
        analysis.series.len(),
        analysis.datasets.len(),
        cache.display(),
        started.elapsed().as_secs_f64(),
        largest.map_or_else(String::new, |f| format!(
            "{} ({:.0} KB)",
            f.name,
            f.contents.len() as f64 / 1024.0
        )),
        args.out.join("index.html").display()
    )?;
    Ok(ExitCode::SUCCESS)
}
