//! The static results site (`tabcontam site`): an index with the leaderboard (Table 2,
//! sortable by a little optional script), one page per model, per dataset, per model family
//! with a timeline and per cell (its prompts, outputs, verdict, evidence, chance level,
//! p-value and a reproducibility block), and the calibration study when the cache has one.
//!
//! Built from the same [`Analysis`] and the same views as `report.html` (Table 2 rows,
//! heatmaps, timelines, the calibration section, the trial explorer's highlighting and
//! diffs); only the page structure is the site's own.
//!
//! Architecture Invariant: relative links only and no external resource (a CSP allows the
//! site's own `site.css` and `site.js`, nothing else), so the folder works from `file://`
//! and from any static host; every page reads without the script. Every interpolated value
//! is escaped by the askama templates (`templates/site/`); file names are built from
//! [`file_stem`]s, which hold no path separator, so an id can neither escape the folder
//! nor inject markup into a link.
//!
//! Architecture Invariant: the site is written into a temporary folder beside the target
//! and renamed into place ([`write`]), so a failure leaves the previous site (or nothing),
//! never half a site. An existing folder is replaced only when it is empty or a site
//! written here (it holds [`MARKER`]).

mod cells;
mod pages;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::File;
use super::file_stem;
use crate::analyze::Analysis;

/// The file that marks a folder as a site written by `tabcontam site` (it may be replaced).
pub const MARKER: &str = ".tabcontam-site";

/// The site's stylesheet: the report's styles and the site's own.
const CSS: &str = concat!(
    include_str!("../../../templates/report.css"),
    include_str!("../../../templates/site/site.css")
);
/// Sorting of the leaderboard and the tables marked sortable (optional: pages read without).
const JS: &str = include_str!("../../../templates/site/site.js");

/// Rendering settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// The cache as the reproducibility commands name it (`--cache`).
    pub cache: String,
}

/// Renders every file of the site (pages, stylesheet, script, the specs of the runs
/// shown), paths relative to the site's folder, in a fixed order.
pub fn render(analysis: &Analysis, options: &Options) -> anyhow::Result<Vec<File>> {
    let names = Names::new(analysis);
    let cells = cells::collect(analysis, &names);
    let mut files = vec![
        File {
            name: "site.css".into(),
            contents: CSS.to_string(),
        },
        File {
            name: "site.js".into(),
            contents: JS.to_string(),
        },
        File {
            name: MARKER.into(),
            contents: "written by `tabcontam site`; the folder is replaced by the next run\n"
                .into(),
        },
    ];
    files.extend(pages::pages(analysis, &names, &cells)?);
    files.extend(cells::pages(analysis, &names, &cells, options)?);
    for run in &analysis.provenance.runs {
        if cells.iter().any(|c| c.run_id == Some(run.id)) {
            files.push(File {
                name: spec_path(run.id),
                contents: run.spec_toml.clone(),
            });
        }
    }
    Ok(files)
}

/// What every page's frame needs: the way back to the site's root, the title, and which
/// site-wide pages the navigation links.
pub struct Chrome {
    /// `""` for pages at the root, `"../"` for pages one folder down.
    pub root: &'static str,
    pub title: String,
    pub nav: Nav,
    pub version: &'static str,
}

/// The site-wide pages beside the leaderboard, each linked from every page when present.
#[derive(Debug, Clone, Copy)]
pub struct Nav {
    pub calibration: bool,
    pub likelihood: bool,
}

impl Nav {
    pub fn of(analysis: &crate::analyze::Analysis) -> Nav {
        Nav {
            calibration: analysis.calibration.is_some(),
            likelihood: !analysis.likelihood.is_empty(),
        }
    }
}

impl Chrome {
    pub fn new(root: &'static str, title: String, nav: Nav) -> Chrome {
        Chrome {
            root,
            title,
            nav,
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

pub struct Link {
    pub text: String,
    pub href: String,
}

/// Where the spec of run `id` is written (relative to the site's folder).
fn spec_path(id: i64) -> String {
    format!("specs/run-{id}.toml")
}

/// The page of every series, dataset and family: file names made of [`file_stem`]s,
/// unique ignoring case (two ids that sanitize alike are numbered, as case-insensitive
/// file systems would merge them).
pub(crate) struct Names {
    /// Per series of the analysis: `models/<stem>.html`.
    pub series: Vec<String>,
    /// The series' stems (cell pages are named after them).
    pub series_stems: Vec<String>,
    /// Per dataset id: its stem (`datasets/<stem>.html`).
    pub datasets: HashMap<String, String>,
}

impl Names {
    fn new(analysis: &Analysis) -> Names {
        let mut used = Unique::default();
        let series_stems: Vec<String> = analysis
            .series
            .iter()
            .map(|s| {
                used.name(&if s.key.source == crate::store::OWN_SOURCE {
                    file_stem(&s.key.model)
                } else {
                    file_stem(&format!("{}-{}", s.key.source, s.key.model))
                })
            })
            .collect();
        let mut used = Unique::default();
        let datasets = analysis
            .datasets
            .iter()
            .map(|d| (d.id.clone(), used.name(&file_stem(&d.id))))
            .collect();
        Names {
            series: series_stems
                .iter()
                .map(|s| format!("models/{s}.html"))
                .collect(),
            series_stems,
            datasets,
        }
    }

    pub fn dataset(&self, id: &str) -> String {
        format!(
            "datasets/{}.html",
            self.datasets.get(id).map_or("dataset", String::as_str)
        )
    }
}

/// Hands out names unique ignoring ASCII case: `x`, then `x-2`, `x-3`, …
#[derive(Default)]
pub(crate) struct Unique(HashSet<String>);

impl Unique {
    pub fn name(&mut self, stem: &str) -> String {
        let mut name = stem.to_string();
        let mut n = 1;
        while !self.0.insert(name.to_ascii_lowercase()) {
            n += 1;
            name = format!("{stem}-{n}");
        }
        name
    }
}

/// A word for a POSIX shell: as is when it holds only safe characters, else single-quoted.
pub(crate) fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./=:@%+,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Writes the site into `dir`: every file into a fresh folder beside it, then that folder
/// renamed into place (the previous site, when there is one, is renamed away first and
/// removed after). `dir` may be missing, empty, or a site written by this command; any
/// other folder is refused, since it would be replaced wholesale.
pub fn write(dir: &Path, files: &[File]) -> anyhow::Result<()> {
    let name = dir
        .file_name()
        .with_context(|| {
            format!(
                "--out {}: name a folder to write the site into",
                dir.display()
            )
        })?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if dir.exists() {
        let replaceable = dir.is_dir()
            && (dir.join(MARKER).is_file()
                || std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none()));
        if !replaceable {
            anyhow::bail!(
                "--out {}: exists and is not a site written by `tabcontam site` (no {MARKER} in it); name a new or empty folder",
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(&parent).with_context(|| {
        format!(
            "cannot create {} for the site: choose a writable --out folder",
            parent.display()
        )
    })?;
    let pid = std::process::id();
    let partial = parent.join(format!(".{name}.partial-{pid}"));
    let result = write_all(&partial, files).and_then(|()| swap_in(&partial, dir, &parent, &name));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    result
}

fn write_all(root: &Path, files: &[File]) -> anyhow::Result<()> {
    let cannot = |path: &Path| {
        format!(
            "cannot write the site into {}: choose a writable --out folder",
            path.display()
        )
    };
    std::fs::create_dir(root).with_context(|| cannot(root))?;
    for file in files {
        let path = root.join(&file.name);
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).with_context(|| cannot(folder))?;
        }
        std::fs::write(&path, &file.contents).with_context(|| cannot(&path))?;
    }
    Ok(())
}

/// Renames the finished folder `partial` to `dir`, moving an earlier site out of the way.
fn swap_in(partial: &Path, dir: &Path, parent: &Path, name: &str) -> anyhow::Result<()> {
    let old = parent.join(format!(".{name}.old-{}", std::process::id()));
    let had_one = dir.exists();
    if had_one {
        std::fs::rename(dir, &old).with_context(|| {
            format!(
                "cannot replace the site at {}: it could not be moved aside",
                dir.display()
            )
        })?;
    }
    if let Err(err) = std::fs::rename(partial, dir) {
        if had_one {
            let _ = std::fs::rename(&old, dir);
        }
        return Err(err).with_context(|| format!("cannot move the site into {}", dir.display()));
    }
    if had_one {
        std::fs::remove_dir_all(&old)
            .with_context(|| format!("the site is written; cannot remove {}", old.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_ignoring_case() {
        let mut unique = Unique::default();
        let names: Vec<String> = ["gpt4", "GPT4", "gpt4", "gpt4-2"]
            .iter()
            .map(|s| unique.name(s))
            .collect();
        assert_eq!(names, ["gpt4", "GPT4-2", "gpt4-3", "gpt4-2-2"]);
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(
            shell_word("cache/tabcontam.sqlite"),
            "cache/tabcontam.sqlite"
        );
        assert_eq!(shell_word("my model"), "'my model'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("$(rm -rf ~)"), "'$(rm -rf ~)'");
        assert_eq!(shell_word(""), "''");
    }

    fn file(name: &str, contents: &str) -> File {
        File {
            name: name.into(),
            contents: contents.into(),
        }
    }

    #[test]
    fn a_site_replaces_a_site_and_refuses_any_other_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("site");
        write(&dir, &[file(MARKER, ""), file("a/one.html", "1")]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("a/one.html")).unwrap(),
            "1"
        );
        write(&dir, &[file(MARKER, ""), file("two.html", "2")]).unwrap();
        assert!(!dir.join("a/one.html").exists(), "the old site is gone");
        assert_eq!(std::fs::read_to_string(dir.join("two.html")).unwrap(), "2");
        // Nothing is left beside it.
        let beside: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(beside.len(), 1);

        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("notes.txt"), "mine").unwrap();
        let err = write(&home, &[file(MARKER, "")]).unwrap_err().to_string();
        assert!(
            err.contains("is not a site written by `tabcontam site`"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(home.join("notes.txt")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn a_failed_write_leaves_no_partial_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("site");
        // A file where a folder must go fails half-way through the files.
        let err = write(
            &dir,
            &[file(MARKER, ""), file("x", "file"), file("x/y.html", "y")],
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot write the site"),
            "{err:#}"
        );
        assert!(!dir.exists());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}
