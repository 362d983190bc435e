//! `tabcontam site` (issue 27 item 3): a static results site from a real cache. A run
//! against a loopback server whose every answer carries a `<script>` payload, then the site:
//! every relative link of every page reaches a file and every `#anchor` an element, nothing
//! external is referenced, no page is over 1 MB, the payload prints as text; a cell page
//! names its request keys (those of the cache), model revision, dataset digest and spec
//! hash, and its command decides the cell again from the cache without sending anything.
//! Headless Chromium loads the index (the sort script runs from `file://`) and a cell page
//! with no console message. Bad input (an existing folder that is not a site, a folder that
//! cannot be written, a cache without cells) is a one-line error that writes nothing. The
//! paper grid (its published results beside our own cells for the same grid) keeps every
//! page under 1 MB.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/paper_grid.rs"]
mod paper_grid;
#[path = "support/skip.rs"]
mod skip;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cli_env::{Env, text};
use mock_server::{Fault, MockConfig, MockServer, Plan, answer};
use serde_json::json;
use tabcontam::store::{OWN_SOURCE, Store};

const KEY_ENV: &str = "TABCONTAM_TEST_API_KEY";
/// What a hostile model writes in front of every answer.
const PAYLOAD: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>";
/// The payload as askama's HTML escaper writes it.
const PAYLOAD_ESCAPED: &str =
    "&#60;script&#62;alert(1)&#60;/script&#62;&#60;img src=x onerror=alert(2)&#62;";
/// A page's size limit (issue 27: no page over 1 MB for the paper grid).
const MAX_PAGE: u64 = 1 << 20;

fn spec(url: &str) -> String {
    let model = |id: &str, label: &str, released: &str| {
        format!(
            "\n[[models]]\nid = \"{id}\"\nlabel = \"{label}\"\nfamily = \"mock\"\nrelease_date = \"{released}\"\n\
             backend = \"openai-compatible\"\napi = \"completions\"\nbase_url = \"{url}/v1\"\n\
             api_key_env = \"{KEY_ENV}\"\nconcurrency = 8\nbackoff_base_ms = 1\nbackoff_max_ms = 20\ntimeout_s = 5\n"
        )
    };
    format!(
        "name = \"site\"\nseed = 0\ndatasets = [\"iris\", \"titanic\"]\n\
         tests = [\"feature-list-uninformed\", \"recognition-features\", \"membership\", \"incomplete-completion\", \"full-completion\"]\n\
         serializations = [\"the-is\"]\n{}{}",
        model("mock-a", "Mock A <script>alert(3)</script>", "2024-01-01"),
        model("mock-b", "Mock B", "2024-06-01"),
    )
}

/// A loopback server that answers as the mock does, with [`PAYLOAD`] in front.
fn hostile_server(env: &Env) -> MockServer {
    env.server(MockConfig::new().script(|request| {
        let body = &request.json;
        let prompt = body["prompt"].as_str().unwrap_or_default();
        let (text, _) = answer(prompt, body["max_tokens"].as_u64().unwrap_or(16), &[]);
        Plan {
            latency: std::time::Duration::ZERO,
            fault: Fault::Body(json!({
                "id": "cmpl", "object": "text_completion", "model": "mock",
                "choices": [{"index": 0, "text": format!("{PAYLOAD} {text}"), "logprobs": null, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })),
        }
    }))
}

/// The binary on the environment's cache.
fn on_cache(env: &Env, args: &[&str]) -> Output {
    env.command(args)
        .arg("--cache")
        .arg(env.cache())
        .output()
        .unwrap()
}

fn ok(output: &Output) -> String {
    let (stdout, stderr) = text(output);
    assert!(output.status.success(), "{stdout}{stderr}");
    stdout
}

/// A run of the spec against the hostile server, and its site in `site/`.
fn run_and_site(env: &Env, server: &MockServer) -> PathBuf {
    let spec = env.spec("site.toml", &spec(&server.url()));
    ok(&on_cache(env, &["run", spec.to_str().unwrap()]));
    let site = env.path("site");
    let stdout = ok(&on_cache(env, &["site", "--out", site.to_str().unwrap()]));
    assert!(stdout.contains(" pages (2 models, 2 datasets)"), "{stdout}");
    site
}

/// Every file under `dir`, relative paths.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The values of `attribute="…"` in `html`, entities decoded.
fn attribute_values(html: &str, attribute: &str) -> Vec<String> {
    let needle = format!(" {attribute}=\"");
    html.match_indices(&needle)
        .map(|(at, _)| {
            let start = at + needle.len();
            let end = start + html[start..].find('"').unwrap();
            html[start..end]
                .replace("&#34;", "\"")
                .replace("&#39;", "'")
                .replace("&#60;", "<")
                .replace("&#62;", ">")
                .replace("&#38;", "&")
                .replace("&amp;", "&")
        })
        .collect()
}

/// Checks every page of the site at `dir`: each `href` and `src` is relative and reaches a
/// file of the site, each `#anchor` an `id` of its page, and no page is over [`MAX_PAGE`].
/// Returns (pages, links checked, largest page and its size).
fn check_site(dir: &Path) -> (usize, usize, (PathBuf, u64)) {
    let files = files_under(dir);
    let pages: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "html"))
        .collect();
    let mut ids: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut texts = BTreeMap::new();
    for page in &pages {
        let html = std::fs::read_to_string(dir.join(page)).unwrap();
        ids.insert(
            (*page).clone(),
            attribute_values(&html, "id").into_iter().collect(),
        );
        texts.insert((*page).clone(), html);
    }
    let mut problems = Vec::new();
    let mut links = 0;
    let mut largest = (PathBuf::new(), 0);
    for (page, html) in &texts {
        let size = html.len() as u64;
        if size > largest.1 {
            largest = (page.clone(), size);
        }
        if size > MAX_PAGE {
            problems.push(format!("{}: {size} bytes, over 1 MB", page.display()));
        }
        for link in attribute_values(html, "href")
            .into_iter()
            .chain(attribute_values(html, "src"))
        {
            links += 1;
            if link.contains(':') || link.starts_with('/') {
                problems.push(format!(
                    "{}: `{link}` is not a relative link",
                    page.display()
                ));
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                // Resolve `..` lexically inside the site.
                let mut parts: Vec<String> = page
                    .parent()
                    .unwrap()
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                for part in path.split('/') {
                    match part {
                        ".." => {
                            if parts.pop().is_none() {
                                problems
                                    .push(format!("{}: `{link}` leaves the site", page.display()));
                            }
                        }
                        "." | "" => {}
                        _ => parts.push(part.to_string()),
                    }
                }
                parts.iter().collect()
            };
            if !files.contains(&target) {
                problems.push(format!(
                    "{}: `{link}`: no file {}",
                    page.display(),
                    target.display()
                ));
            } else if !anchor.is_empty()
                && !ids.get(&target).is_some_and(|ids| ids.contains(anchor))
            {
                problems.push(format!(
                    "{}: `{link}`: no id `{anchor}` in {}",
                    page.display(),
                    target.display()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    (pages.len(), links, largest)
}

/// The cell page of `model` × `dataset` × test `number`.
fn cell_page(site: &Path, model: &str, dataset: &str, number: u8) -> String {
    std::fs::read_to_string(site.join(format!("cells/{model}--{dataset}--{number:02}.html")))
        .unwrap()
}

/// The text between `from` and the next `to` after it.
fn between<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text.find(from).unwrap_or_else(|| panic!("no `{from}`")) + from.len();
    &text[start..start + text[start..].find(to).unwrap()]
}

/// Text of a page or of Chromium's DOM, entities decoded.
fn unescape(text: &str) -> String {
    text.replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#38;", "&")
        .replace("&amp;", "&")
}

#[test]
fn site_of_a_run_links_escapes_and_recomputes_each_cell() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    let server = hostile_server(&env);
    let site = run_and_site(&env, &server);
    let (pages, links, largest) = check_site(&site);
    // The same cache gives the same site, byte for byte.
    let twin = env.path("twin");
    ok(&on_cache(&env, &["site", "--out", twin.to_str().unwrap()]));
    assert_eq!(files_under(&site), files_under(&twin));
    for file in files_under(&site) {
        assert!(
            std::fs::read(site.join(&file)).unwrap() == std::fs::read(twin.join(&file)).unwrap(),
            "{} differs between two sites of one cache",
            file.display()
        );
    }
    // Index, 2 models, 2 datasets, 1 family, 2 × 2 × 5 cells.
    assert_eq!(pages, 1 + 2 + 2 + 1 + 20, "{:?}", files_under(&site));
    assert!(links > 300, "{links} links");
    eprintln!(
        "{pages} pages, {links} links; largest {} ({} bytes)",
        largest.0.display(),
        largest.1
    );

    // The payload is text everywhere: no page holds it raw, and the only script element
    // of any page is the site's own.
    for file in files_under(&site) {
        let text = std::fs::read_to_string(site.join(&file)).unwrap();
        assert!(
            !text.contains(PAYLOAD) && !text.contains("<img"),
            "{}",
            file.display()
        );
        if file.extension().is_some_and(|e| e == "html") {
            assert_eq!(text.matches("<script").count(), 1, "{}", file.display());
            assert!(
                text.contains("site.js\" defer></script>"),
                "{}",
                file.display()
            );
        }
    }
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(
        index.contains("Mock A &#60;script&#62;alert(3)&#60;/script&#62;"),
        "{index}"
    );

    // A membership cell: its trials, verdict, evidence, chance level and p-value.
    let page = cell_page(&site, "mock-a", "iris", 10);
    assert!(page.contains(PAYLOAD_ESCAPED), "outputs are shown, escaped");
    assert_eq!(page.matches(r#"<section class="trial-group""#).count(), 100);
    for fact in [
        "<dt>Accuracy</dt>",
        "<dt>Chance level</dt>",
        "<dt>p-value</dt>",
        "<dt>Evidence</dt>",
    ] {
        assert!(page.contains(fact), "{fact}");
    }

    // Its reproducibility block names what the cache holds.
    let store = Store::open_read_only(env.cache()).unwrap();
    let keys: BTreeSet<String> = store
        .trials()
        .unwrap()
        .into_iter()
        .filter(|t| t.model == "mock-a" && t.dataset == "iris" && t.test.number() == 10)
        .map(|t| t.request_key.to_hex())
        .collect();
    let shown: BTreeSet<String> = attribute_free_codes(&page, r#"<code class="key">"#);
    assert_eq!(shown, keys, "every request key of the cell, and only those");
    let model = store
        .models()
        .unwrap()
        .into_iter()
        .find(|m| m.id == "mock-a")
        .unwrap();
    assert!(page.contains(&format!("revision {}", model.identity.revision)));
    let dataset = store
        .datasets()
        .unwrap()
        .into_iter()
        .find(|d| d.id == "iris")
        .unwrap();
    assert!(page.contains(&dataset.checksum), "the dataset digest");
    let spec_href = between(&page, "<dt>Spec</dt><dd><a href=\"../", "\"");
    let spec_text = std::fs::read_to_string(site.join(spec_href)).unwrap();
    let run_id = store.cells().unwrap()[0].run_id.unwrap();
    assert_eq!(Some(spec_text.clone()), store.run_spec(run_id).unwrap());
    assert!(page.contains(&blake3::hash(spec_text.as_bytes()).to_hex().to_string()));
    assert!(page.contains(&format!("tabcontam {}", env!("CARGO_PKG_VERSION"))));
    let before: Vec<_> = store
        .cells()
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.model,
                c.dataset,
                c.test,
                c.result.passed,
                c.result.score.to_bits(),
            )
        })
        .collect();
    drop(store);

    // The command decides the cell again from the cache, from the site's folder, sending
    // nothing, and the verdicts stay.
    let command = unescape(between(&page, r#"<pre class="command"><code>"#, "</code>"));
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(&words[..3], ["tabcontam", "run", spec_href], "{command}");
    assert!(
        command.contains(" --model mock-a --offline --cache "),
        "{command}"
    );
    let sent = server.request_count();
    let again = env
        .command(&words[1..])
        .current_dir(&site)
        .output()
        .unwrap();
    ok(&again);
    assert_eq!(server.request_count(), sent, "the command sends nothing");
    let store = Store::open_read_only(env.cache()).unwrap();
    let after: Vec<_> = store
        .cells()
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.model,
                c.dataset,
                c.test,
                c.result.passed,
                c.result.score.to_bits(),
            )
        })
        .collect();
    assert_eq!(before, after);
    let redecided = store
        .cells()
        .unwrap()
        .into_iter()
        .find(|c| c.model == "mock-a")
        .unwrap();
    assert_ne!(
        redecided.run_id.unwrap(),
        run_id,
        "decided again by the new run"
    );
    drop(store);

    // A second site replaces the first (nothing of the old one stays), and the cell names
    // the run that decided it last.
    std::fs::write(site.join("stray.html"), "old").unwrap();
    ok(&on_cache(&env, &["site", "--out", site.to_str().unwrap()]));
    assert!(!site.join("stray.html").exists());
    let new_spec = format!("specs/run-{}.toml", redecided.run_id.unwrap());
    assert!(cell_page(&site, "mock-a", "iris", 10).contains(&format!("href=\"../{new_spec}\"")));
    assert!(site.join(&new_spec).is_file());
    check_site(&site);
    let beside: Vec<_> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            (n.contains("site") && n != "site" && n != "site.toml")
                || (n.contains("twin") && n != "twin")
        })
        .collect();
    assert!(
        beside.is_empty(),
        "nothing left beside the site: {beside:?}"
    );
}

/// The texts of `<code class="key">…</code>` elements.
fn attribute_free_codes(page: &str, open: &str) -> BTreeSet<String> {
    page.match_indices(open)
        .map(|(at, _)| {
            let start = at + open.len();
            page[start..start + page[start..].find("</code>").unwrap()].to_string()
        })
        .collect()
}

/// One line on stderr, exit 1, and what `dir` held before still there (or nothing).
fn assert_one_line_error(output: &Output, needle: &str) {
    let (stdout, stderr) = text(output);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
}

#[test]
fn bad_output_folders_and_empty_caches_are_one_line_errors_that_write_nothing() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    // No cache at all.
    let out = on_cache(&env, &["site", "--out", env.path("site").to_str().unwrap()]);
    assert_one_line_error(&out, "no cache at");
    assert!(!env.path("site").exists());

    // A cache without cells.
    drop(Store::open(env.cache()).unwrap());
    let out = on_cache(&env, &["site", "--out", env.path("site").to_str().unwrap()]);
    assert_one_line_error(&out, "holds no cells: nothing to show");
    assert!(!env.path("site").exists());

    let server = hostile_server(&env);
    let spec = env.spec("site.toml", &spec(&server.url()));
    ok(&on_cache(&env, &["run", spec.to_str().unwrap()]));
    // `--trials N` keeps the first N trials of a cell (and says so); 0 is refused.
    let short = env.path("short");
    ok(&on_cache(
        &env,
        &["site", "--out", short.to_str().unwrap(), "--trials", "2"],
    ));
    let page = cell_page(&short, "mock-a", "iris", 10);
    assert_eq!(page.matches(r#"<section class="trial-group""#).count(), 2);
    assert!(page.contains("first 2 of 100 shown"), "{page}");
    assert_eq!(
        attribute_free_codes(&page, r#"<code class="key">"#).len(),
        2
    );
    let out = on_cache(
        &env,
        &["site", "--out", short.to_str().unwrap(), "--trials", "0"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap refuses 0: {:?}",
        text(&out)
    );
    // An existing folder that is not a site is left alone.
    let mine = env.path("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep me").unwrap();
    let out = on_cache(&env, &["site", "--out", mine.to_str().unwrap()]);
    assert_one_line_error(&out, "is not a site written by `tabcontam site`");
    assert_eq!(files_under(&mine), [PathBuf::from("notes.txt")]);
    // A folder that cannot be made (its parent is a file; root ignores permissions).
    let file = env.path("a-file");
    std::fs::write(&file, "").unwrap();
    let out = on_cache(
        &env,
        &["site", "--out", file.join("site").to_str().unwrap()],
    );
    assert_one_line_error(&out, "choose a writable --out folder");
    let left: Vec<_> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Chromium's command line for a headless, offline, throw-away profile that logs console
/// messages (CSP violations included) to stderr.
fn chromium(binary: &Path, profile: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// The DOM of `url` after load, asserting no console message.
fn dom(binary: &Path, profile: &Path, url: &str) -> String {
    let output = chromium(binary, profile).arg(url).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "chromium failed: {stderr}");
    let console: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            l.contains(":CONSOLE")
                || l.contains("Uncaught")
                || l.contains("Content Security Policy")
        })
        .collect();
    assert!(console.is_empty(), "{url}: console messages: {console:#?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The model labels of the leaderboard's rows, top to bottom.
fn leaderboard(dom: &str) -> Vec<String> {
    let table = between(dom, r#"id="leaderboard-table""#, "</table>");
    let body = between(table, "<tbody>", "</tbody>");
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            let link = between(row, "<a href=", "</a>");
            unescape(&link[link.find('>').unwrap() + 1..])
        })
        .collect()
}

#[test]
fn chromium_loads_the_index_sorted_from_the_address_and_a_cell_page() {
    let Some(binary) = skip::tool(
        &["chromium", "chromium-browser", "google-chrome"],
        "apt-get install chromium",
    ) else {
        return;
    };
    let env = Env::new().var(KEY_ENV, "sk-test");
    let server = hostile_server(&env);
    let site = run_and_site(&env, &server);
    let index = format!("file://{}", site.join("index.html").display());

    // Without an address fragment the rows keep Table 2's order; the script turned the
    // sortable headers into buttons.
    let plain = dom(&binary, &env.path("profile-1"), &index);
    assert!(
        plain.contains(r#"<button type="button" class="sort">"#),
        "the script ran"
    );
    let ranked = leaderboard(&plain);
    assert_eq!(ranked.len(), 2);
    // `#sort=model-asc` and `#sort=model-desc` sort by label, from the address alone.
    let mut by_label = ranked.clone();
    by_label.sort_by_key(|l| l.to_lowercase());
    let asc = dom(
        &binary,
        &env.path("profile-2"),
        &format!("{index}#sort=model-asc"),
    );
    assert!(asc.contains(r#"data-sorted="model-asc""#));
    assert_eq!(leaderboard(&asc), by_label);
    let desc = dom(
        &binary,
        &env.path("profile-3"),
        &format!("{index}#sort=model-desc"),
    );
    by_label.reverse();
    assert_eq!(leaderboard(&desc), by_label);
    assert!(
        by_label.iter().any(|l| l.contains("<script>alert(3)")),
        "labels are text: {by_label:?}"
    );

    // A cell page: the outputs are text in the DOM, the only script is the site's.
    let cell = dom(
        &binary,
        &env.path("profile-4"),
        &format!(
            "file://{}",
            site.join("cells/mock-a--iris--03.html").display()
        ),
    );
    assert!(cell.contains("Prompts and outputs") && cell.contains("Reproducibility"));
    assert!(
        cell.contains("&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;")
    );
    assert_eq!(cell.to_lowercase().matches("<script").count(), 1);
    assert!(!cell.contains("<img"));
}

/// The paper grid: 16 imported models beside our own 16 with every trial; every page under
/// 1 MB and every link resolving. Prints the page count, the largest page and the time the
/// command took (whatever build the test runs; release figures in docs/benchmarks.md, on
/// the cache this test keeps).
#[test]
fn paper_grid_site_keeps_every_page_under_one_megabyte() {
    let shared = skip::shared_dir();
    let Some(shared) = skip::require(
        shared,
        |s| paper_grid::present(s),
        "the paper's files, results or parity records are not there (../shared beside the checkout)",
    ) else {
        return;
    };
    let env = Env::new();
    let grid = paper_grid::build(&env.cache(), &shared);
    assert_eq!(grid.own_models, 16);
    // Kept for timing a release build on it (`tabcontam site --cache … --out …`).
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("paper-grid-cache.sqlite");
    std::fs::copy(env.cache(), &keep).unwrap();
    let site = env.path("site");
    let started = std::time::Instant::now();
    let stdout = ok(&on_cache(&env, &["site", "--out", site.to_str().unwrap()]));
    let took = started.elapsed();
    let (pages, links, largest) = check_site(&site);
    let bytes: u64 = files_under(&site)
        .iter()
        .map(|f| std::fs::metadata(site.join(f)).unwrap().len())
        .sum();
    eprintln!(
        "paper grid site: {} cells, {} trials; {pages} pages, {links} links, {:.1} MB; largest {} ({:.0} KB); {:.2} s (this build); {}",
        grid.cells,
        grid.trials,
        bytes as f64 / 1e6,
        largest.0.display(),
        largest.1 as f64 / 1024.0,
        took.as_secs_f64(),
        stdout.trim()
    );
    // Index, 32 models, 9 datasets, families, and a page per cell: ours (16 × 9 × 12) and
    // the imported ones the scores use.
    let cells = files_under(&site.join("cells")).len();
    assert!(cells > 16 * 9 * 12 + 15 * 9 * 9, "{cells} cell pages");
    assert!(pages > 1 + 32 + 9 + cells);
    let own = cell_page(&site, "gpt4o", "adult", 10);
    assert_eq!(own.matches(r#"<section class="trial-group""#).count(), 100);
    let store = Store::open_read_only(env.cache()).unwrap();
    assert!(
        store
            .cells()
            .unwrap()
            .iter()
            .any(|c| c.source == OWN_SOURCE)
    );
}
