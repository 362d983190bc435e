//! The house keeps its shape (as rust-analyzer's `tidy.rs`): no two files of `src/` import
//! each other, directly or through others; commands stay thin and long files say why; and
//! no binary, model, cache or wheel is committed. Runs with `cargo test`; reads the tree, runs nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/skip.rs"]
mod skip;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Every `.rs` file under `src/`, keyed by its module path (`run::spec` for
/// `src/run/spec.rs`, `run` for `src/run/mod.rs`, the empty path for `lib.rs`).
fn modules(root: &str) -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(path.file_name().unwrap().to_string_lossy().to_string());
                walk(&path, &inner, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut module = prefix.to_vec();
                if name != "mod" && !(prefix.is_empty() && (name == "lib" || name == "main")) {
                    module.push(name.clone());
                }
                if prefix.is_empty() && name == "main" {
                    continue; // the binary: it imports the library, nothing imports it
                }
                out.insert(module, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&Path::new(REPO).join(root), &[], &mut out);
    out
}

/// A file's code without comments and without its trailing `#[cfg(test)]` module (a unit
/// test's `use super::*` is the file importing itself).
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a file names: `crate::a::b…` and `super::…` (resolved from the file's
/// own module), including the names inside `use x::{a, b::c}` groups.
fn named_paths(module: &[String], is_mod_file: bool, code: &str) -> Vec<Vec<String>> {
    // `super` of `a::b` (file a/b.rs) is `a`; of a `mod.rs` file `a` it is the parent.
    let parent: Vec<String> = if is_mod_file || !module.is_empty() {
        module[..module.len().saturating_sub(1)].to_vec()
    } else {
        Vec::new()
    };
    let mut paths = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = |word: &str| {
            bytes[i..].iter().take(word.len()).copied().eq(word.chars())
                && (i == 0 || !is_ident(bytes[i - 1]))
        };
        let base = if starts("crate::") {
            i += "crate::".len();
            Vec::new()
        } else if starts("super::") {
            i += "super::".len();
            parent.clone()
        } else {
            i += 1;
            continue;
        };
        // Read `a::b::{c, d::e}` as the paths it names (one level of braces is enough
        // to reach the file a name lives in).
        let mut path = base;
        loop {
            if bytes.get(i) == Some(&'{') {
                let close = bytes[i..].iter().position(|&c| c == '}').unwrap_or(0) + i;
                let group: String = bytes[i + 1..close].iter().collect();
                for item in group.split(',') {
                    let mut inner = path.clone();
                    inner.extend(
                        item.trim()
                            .split("::")
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty() && s != "self" && s != "*"),
                    );
                    paths.push(inner);
                }
                i = close + 1;
                break;
            }
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            if i > start {
                let segment: String = bytes[start..i].iter().collect();
                if segment == "super" {
                    path.pop();
                } else {
                    path.push(segment);
                }
            }
            if bytes[i..].starts_with(&[':', ':']) {
                i += 2;
                continue;
            }
            paths.push(path);
            break;
        }
    }
    paths
}

/// The file a path names: the longest prefix of it that is a module with a file.
fn file_of<'a>(
    path: &[String],
    modules: &'a BTreeMap<Vec<String>, PathBuf>,
) -> Option<&'a Vec<String>> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get_key_value(&path[..n]).map(|(k, _)| k))
}

/// Import edges between files, leaving out those between a module file and its own
/// descendants (`mod.rs` declaring and re-exporting its children is the module tree, not
/// a circle).
fn import_graph(root: &str) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules = modules(root);
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, file) in &modules {
        let is_mod_file = file
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        for path in named_paths(module, is_mod_file, &code_of(file)) {
            let Some(target) = file_of(&path, &modules) else {
                continue;
            };
            let related = target.starts_with(module) || module.starts_with(target);
            if !related {
                graph
                    .entry(module.clone())
                    .or_default()
                    .insert(target.clone());
            }
        }
    }
    graph
}

/// Groups of two or more files that reach each other (Tarjan's strongly connected
/// components), each with the edges inside it.
fn circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    let nodes: Vec<&Vec<String>> = graph
        .keys()
        .chain(graph.values().flatten())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index_of: BTreeMap<&Vec<String>, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            graph
                .get(*n)
                .map(|targets| targets.iter().map(|t| index_of[t]).collect())
                .unwrap_or_default()
        })
        .collect();
    struct Tarjan<'a> {
        edges: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.edges[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(index) if self.on_stack[w] => self.low[v] = self.low[v].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        edges: &edges,
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on_stack: vec![false; nodes.len()],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..nodes.len() {
        if tarjan.index[v].is_none() {
            tarjan.visit(v);
        }
    }
    tarjan
        .found
        .into_iter()
        .map(|c| c.into_iter().map(|i| nodes[i].clone()).collect())
        .collect()
}

#[test]
fn no_two_files_of_src_import_each_other() {
    let graph = import_graph("src");
    // The reader sees real imports: the executor reads the cache through the store.
    let execute = ["run".to_string(), "execute".to_string()].to_vec();
    assert!(
        graph
            .get(&execute)
            .is_some_and(|targets| targets.contains(&vec!["store".to_string()])),
        "the import reader lost `run::execute -> store`: {:?}",
        graph.get(&execute)
    );
    assert_no_circles("src", &graph);
    // The kernels crate keeps the same rule (its integer kernels once formed a circle).
    let kernels = import_graph("crates/kernels/src");
    let vnni = vec!["vnni".to_string()];
    assert!(
        kernels
            .get(&vnni)
            .is_some_and(|targets| targets.contains(&vec!["int8_rows".to_string()])),
        "the import reader lost `vnni -> int8_rows`: {:?}",
        kernels.get(&vnni)
    );
    assert_no_circles("crates/kernels/src", &kernels);
}

fn assert_no_circles(root: &str, graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) {
    let found = circles(graph);
    let described: Vec<String> = found
        .iter()
        .map(|circle| {
            let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
            let ties: Vec<String> = circle
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| circle.contains(to))
                        .map(move |to| format!("{} -> {}", from.join("::"), to.join("::")))
                })
                .collect();
            format!("{} ({})", names.join(", "), ties.join("; "))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import circles between files of {root}/ (move the shared type down into a file both can import):\n{}",
        described.join("\n")
    );
}

/// The circle finder itself: a planted two-file circle and a three-file one are found,
/// a chain is not.
#[test]
fn the_circle_finder_finds_planted_circles() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = [
        (m("a::x"), [m("a::y")].into()),
        (m("a::y"), [m("a::x"), m("b")].into()),
        (m("b"), [m("c")].into()),
        (m("c"), [m("d")].into()),
        (m("d"), [m("b")].into()),
        (m("e"), [m("b")].into()),
    ]
    .into();
    let mut found: Vec<BTreeSet<Vec<String>>> = circles(&graph)
        .into_iter()
        .map(|c| c.into_iter().collect())
        .collect();
    found.sort();
    assert_eq!(
        found,
        vec![
            [m("a::x"), m("a::y")].into(),
            [m("b"), m("c"), m("d")].into()
        ]
    );
    // `use super::{view::Analysis, Result}` from a::explorer names a::view and a.
    let named = named_paths(
        &m("a::explorer"),
        false,
        "use super::{view::Analysis, Result};\nlet x = crate::store::Store::open();",
    );
    assert!(named.contains(&m("a::view::Analysis")), "{named:?}");
    assert!(named.contains(&m("a::Result")), "{named:?}");
    assert!(named.contains(&m("store::Store::open")), "{named:?}");
}

/// A command is settings, one library call and printing (ARCHITECTURE § Layers).
const MAX_COMMAND_LINES: usize = 300;
/// A source file longer than this states why in a `//! Size:` line of its module docs.
const MAX_FILE_LINES: usize = 700;

/// Every `.rs` file under `dir` (recursively) with its line count.
fn rust_files(dir: &Path) -> Vec<(PathBuf, usize)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            out.push((path, lines));
        }
    }
    out.sort();
    out
}

/// The offenders among `files`: a command over [`MAX_COMMAND_LINES`], any file over
/// [`MAX_FILE_LINES`] without a `//! Size:` reason in its leading module docs.
fn size_offenders(files: &[(PathBuf, usize)], text_of: impl Fn(&Path) -> String) -> Vec<String> {
    let mut offenders = Vec::new();
    for (path, lines) in files {
        let shown = path.strip_prefix(REPO).unwrap_or(path).display();
        let in_commands = path.components().any(|c| c.as_os_str() == "commands");
        if in_commands && *lines > MAX_COMMAND_LINES {
            offenders.push(format!(
                "{shown}: a command of {lines} lines (at most {MAX_COMMAND_LINES}): move its logic into the library and keep settings, one call and printing"
            ));
        }
        if *lines > MAX_FILE_LINES {
            let text = text_of(path);
            let has_reason = text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .any(|l| l.starts_with("//! Size:"));
            if !has_reason {
                offenders.push(format!(
                    "{shown}: {lines} lines (over {MAX_FILE_LINES}): split it along a seam, or say why in a `//! Size:` line of its module docs"
                ));
            }
        }
    }
    offenders
}

#[test]
fn commands_stay_thin_and_long_files_say_why() {
    let mut files = rust_files(&Path::new(REPO).join("src"));
    files.extend(rust_files(&Path::new(REPO).join("crates")));
    let offenders = size_offenders(&files, |p| std::fs::read_to_string(p).unwrap());
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn the_size_rule_catches_a_fat_command_and_an_unexplained_long_file() {
    let command = Path::new(REPO).join("src/commands/fat.rs");
    let long = Path::new(REPO).join("src/long.rs");
    let explained = Path::new(REPO).join("src/explained.rs");
    let files = vec![
        (command.clone(), MAX_COMMAND_LINES + 1),
        (long.clone(), MAX_FILE_LINES + 1),
        (explained.clone(), MAX_FILE_LINES + 1),
        (
            Path::new(REPO).join("src/commands/thin.rs"),
            MAX_COMMAND_LINES,
        ),
    ];
    let offenders = size_offenders(&files, |p| {
        if p == explained {
            "//! A module.\n//!\n//! Size: one parser.\n\nfn f() {}".to_string()
        } else {
            "//! A module.\n\n// Size: not in the module docs\nfn f() {}".to_string()
        }
    });
    assert_eq!(offenders.len(), 2, "{offenders:?}");
    assert!(
        offenders[0].starts_with("src/commands/fat.rs: a command of 301 lines"),
        "{offenders:?}"
    );
    assert!(
        offenders[1].starts_with("src/long.rs: 701 lines"),
        "{offenders:?}"
    );
}

/// The folders of ARCHITECTURE.md's code map with the files each lists (`**`src/run/`**`
/// headings followed by ``| `file.rs` |`` rows).
fn code_map() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(Path::new(REPO).join("ARCHITECTURE.md")).unwrap();
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut folder: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line
            .strip_prefix("**`")
            .and_then(|r| r.strip_suffix("/`**"))
        {
            folder = Some(rest.to_string());
            map.entry(rest.to_string()).or_default();
        } else if let (Some(folder), Some(rest)) = (&folder, line.strip_prefix("| `")) {
            if let Some(name) = rest.split('`').next().filter(|n| n.ends_with(".rs")) {
                map.get_mut(folder).unwrap().insert(name.to_string());
            }
        } else if line.starts_with("## ") {
            folder = None;
        }
    }
    map
}

#[test]
fn the_code_map_lists_every_source_file_and_no_other() {
    let mut on_disk: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for root in ["src", "crates/kernels/src"] {
        for (path, _) in rust_files(&Path::new(REPO).join(root)) {
            let relative = path.strip_prefix(REPO).unwrap();
            let folder = relative.parent().unwrap().display().to_string();
            let name = relative.file_name().unwrap().to_string_lossy().to_string();
            on_disk.entry(folder).or_default().insert(name);
        }
    }
    let listed = code_map();
    let mut problems = Vec::new();
    for (folder, files) in &on_disk {
        let empty = BTreeSet::new();
        let known = listed.get(folder).unwrap_or(&empty);
        for file in files.difference(known) {
            problems.push(format!("{folder}/{file}: not in ARCHITECTURE.md's code map (add a row `| `{file}` | what it is |` under **`{folder}/`**)"));
        }
    }
    for (folder, files) in &listed {
        let empty = BTreeSet::new();
        let present = on_disk.get(folder).unwrap_or(&empty);
        for file in files.difference(present) {
            problems.push(format!(
                "{folder}/{file}: in ARCHITECTURE.md's code map but not on disk (remove its row)"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Extensions of files that never belong in the tree.
const FOREIGN: [&str; 12] = [
    ".whl",
    ".gguf",
    ".safetensors",
    ".bin",
    ".so",
    ".sqlite",
    ".sqlite-wal",
    ".sqlite-shm",
    ".duckdb",
    ".zip",
    ".tar.gz",
    ".pt",
];
/// The largest file the tree may hold (the biggest shipped dataset is 3.8 MB).
const MAX_FILE_BYTES: u64 = 5 << 20;

#[test]
fn no_binaries_models_caches_or_wheels_are_committed() {
    let output = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(REPO)
        .output()
        .expect("git runs");
    if !output.status.success() {
        skip::skip("not a git checkout (a source tarball): no committed files to check");
        return;
    }
    let mut offenders = Vec::new();
    for name in output.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).to_string();
        let path = Path::new(REPO).join(&name);
        let Ok(meta) = std::fs::metadata(&path) else {
            continue; // deleted in the work tree, not yet committed
        };
        if FOREIGN.iter().any(|ext| name.ends_with(ext)) {
            offenders.push(format!(
                "{name}: a {} file",
                name.rsplit('.').next().unwrap()
            ));
        } else if meta.len() > MAX_FILE_BYTES {
            offenders.push(format!("{name}: {} bytes", meta.len()));
        } else {
            let head: Vec<u8> = std::fs::read(&path)
                .unwrap()
                .into_iter()
                .take(8192)
                .collect();
            if head.contains(&0) {
                offenders.push(format!("{name}: binary content"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "files that do not belong in the tree (install them from a script, ignore them in .gitignore):\n{}",
        offenders.join("\n")
    );
}

/// Every relative link of README.md, ARCHITECTURE.md and `docs/**/*.md` reaches a file,
/// and an anchor (`file.md#heading`, `#heading`) a heading of that file by GitHub's slug
/// rule; README.md stays a short guide (at most 250 lines, the rest in `docs/`).
#[test]
fn markdown_links_resolve() {
    const README_MAX_LINES: usize = 250;

    /// GitHub's heading anchor: lowercase; letters, digits, `-` and `_` kept, spaces
    /// become `-`, every other character dropped.
    fn slug(heading: &str) -> String {
        heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Lines outside fenced code blocks (``` or ~~~), with their 1-based numbers.
    fn prose(text: &str) -> Vec<(usize, &str)> {
        let mut fence: Option<&str> = None;
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
            match (fence, marker) {
                (None, Some(m)) => fence = Some(m),
                (Some(open), Some(m)) if open == m => fence = None,
                (None, None) => out.push((i + 1, line)),
                _ => {}
            }
        }
        out
    }

    /// The anchors of a file's ATX headings; a repeated heading gets `-1`, `-2`, … as on
    /// GitHub.
    fn anchors(text: &str) -> BTreeSet<String> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut out = BTreeSet::new();
        for (_, line) in prose(text) {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
                continue;
            }
            let base = slug(line[hashes..].trim().trim_end_matches('#').trim());
            let count = seen.entry(base.clone()).or_insert(0);
            out.insert(if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            });
            *count += 1;
        }
        out
    }

    /// `(line, target)` of every `[text](target)` outside code blocks and code spans.
    fn links(text: &str) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (number, line) in prose(text) {
            // Drop code spans: `[a](b)` inside backticks is an example, not a link.
            let plain: String = line
                .split('`')
                .enumerate()
                .filter(|(i, _)| i % 2 == 0)
                .map(|(_, part)| part)
                .collect::<Vec<_>>()
                .join(" ");
            let mut rest = plain.as_str();
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let Some(end) = after.find(')') else { break };
                let target = after[..end].trim();
                // `<path>` and `path "title"` forms.
                let target = target
                    .strip_prefix('<')
                    .and_then(|t| t.split_once('>').map(|(t, _)| t))
                    .unwrap_or_else(|| target.split_whitespace().next().unwrap_or(""));
                out.push((number, target.to_string()));
                rest = &after[end + 1..];
            }
        }
        out
    }

    let repo = Path::new(REPO);
    // The invariants of the link reader itself.
    assert_eq!(
        slug("Controlled contamination (`tabcontam contaminate`)"),
        "controlled-contamination-tabcontam-contaminate"
    );
    assert_eq!(
        slug("Scale-out: servers, shards_merging"),
        "scale-out-servers-shards_merging"
    );
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n#nohead\n"),
        ["a".to_string(), "a-1".to_string()].into()
    );
    assert_eq!(
        links("[a](x.md) `[b](y.md)` [c](<z w.md> \"t\") and [d](e.md#f)\n```\n[g](h.md)\n```"),
        vec![
            (1, "x.md".to_string()),
            (1, "z w.md".to_string()),
            (1, "e.md#f".to_string())
        ]
    );

    fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                markdown_under(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![repo.join("README.md"), repo.join("ARCHITECTURE.md")];
    markdown_under(&repo.join("docs"), &mut files);
    files.sort();

    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let shown = file
            .strip_prefix(repo)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("{shown}: cannot read it ({e})"));
        for (line, target) in links(&text) {
            let lower = target.to_ascii_lowercase();
            if target.is_empty() || lower.contains("://") || lower.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                broken.push(format!(
                    "{shown}:{line}: link `{target}`: no file {} (fix the path, relative to {shown}, or create the file)",
                    resolved.strip_prefix(repo).unwrap_or(&resolved).display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_none_or(|e| e != "md") || anchor.is_empty() {
                continue; // anchors into source files (#L10) are GitHub's, not headings
            }
            let known = anchors(&std::fs::read_to_string(&resolved).unwrap_or_default());
            if !known.contains(anchor) {
                broken.push(format!(
                    "{shown}:{line}: link `{target}`: no heading with anchor `#{anchor}` in {} (fix the anchor to one of: {})",
                    resolved.strip_prefix(repo).unwrap_or(&resolved).display(),
                    known.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(
        checked > 0,
        "no relative links found in {files:?}: the link reader is broken"
    );
    assert!(
        broken.is_empty(),
        "broken Markdown links:\n{}",
        broken.join("\n")
    );

    let readme_lines = std::fs::read_to_string(repo.join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        readme_lines <= README_MAX_LINES,
        "README.md has {readme_lines} lines, more than {README_MAX_LINES}: it is a short guide \
         (what it is, the two commands, install, a tour, where to go next); move the rest into \
         docs/ and link it"
    );
}
