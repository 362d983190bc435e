//! Test 17, `row-order`, on a real model: SmolLM2-135M-Instruct (Q4_1 GGUF, in process)
//! never saw the synthetic tables made here, so the test must not call them contaminated,
//! even when the file is written sorted or grouped by a column — the case where a naive
//! permutation test fails, since any model that knows tables prefers a sorted order.
//! Without the model the test is skipped (failed in CI, see support/skip.rs).

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/skip.rs"]
mod skip;

use cli_env::Env;
use tabcontam::dataset::synth;
use tabcontam::likelihood::row_order;
use tabcontam::store::Store;

fn model_file() -> Option<std::path::PathBuf> {
    skip::require(
        skip::assets_dir()
            .join("models")
            .join("SmolLM2-135M-Instruct.Q4_1.gguf"),
        |p| p.is_file(),
        "the SmolLM2 GGUF is missing; run scripts/ci-install-test-server.sh",
    )
}

/// A synthetic table's file with its data lines sorted by `column` (stable, so ties keep
/// the generated order), imported as `name`.
fn import_sorted(env: &Env, name: &str, seed: u64, rows: usize, column: usize) {
    let generated = synth::generate(seed, rows);
    let mut lines = generated.csv.lines();
    let header = lines.next().unwrap().to_string();
    let mut data: Vec<&str> = lines.collect();
    let key = |line: &&str| line.split(',').nth(column).unwrap().to_string();
    match column {
        // The integer column sorts as a number.
        3 => data.sort_by_key(|line| key(line).parse::<u64>().unwrap()),
        _ => data.sort_by_key(key),
    }
    let target = header.split(',').next_back().unwrap().to_string();
    let file = env.file(
        &format!("{name}.csv"),
        format!("{header}\n{}\n", data.join("\n")),
    );
    env.ok(&[
        "datasets",
        "import",
        file.to_str().unwrap(),
        "--name",
        name,
        "--target",
        &target,
    ]);
}

/// The synthetic orders a spec can name (`synthetic:<seed>:<rows>:sorted|grouped`, the
/// negatives of `experiments/row-order-null.toml`) reach the test's plan as the imported
/// files above do: a sorted one refused with its column named, a grouped one permuted
/// within its groups. No model is needed to plan.
#[test]
fn synthetic_tables_named_sorted_or_grouped_are_planned_as_their_order_requires() {
    let env = Env::new();
    let header = |seed| {
        synth::generate(seed, 24)
            .csv
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    let column = |seed, index| header(seed).split(',').nth(index).unwrap().to_string();

    let sorted = env.ok(&[
        "prompts",
        "--dataset",
        "synthetic:41:24:sorted",
        "--test",
        "row-order",
    ]);
    let first_line = sorted.lines().next().unwrap();
    assert!(
        first_line.starts_with("row-order on synthetic-41-24-sorted: skipped")
            && first_line.contains(&format!("column `{}` is sorted", column(41, 3))),
        "{first_line}"
    );

    let grouped = env.ok(&[
        "prompts",
        "--dataset",
        "synthetic:42:24:grouped",
        "--test",
        "row-order",
    ]);
    let first_line = grouped.lines().next().unwrap();
    let category = column(42, 0);
    assert!(
        first_line.contains("3 shards of 8 rows")
            && first_line.contains(&format!("rows move only within runs of equal {category}")),
        "{first_line}"
    );
    // Every permutation keeps each row in its group: a shard's category column reads the
    // same, in the same order, in every order shown.
    let category_runs: Vec<Vec<&str>> = grouped
        .split("=== ")
        .skip(1)
        .map(|shard| {
            shard
                .lines()
                .skip(2)
                .filter(|line| !line.is_empty())
                .map(|line| line.split(',').next().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(category_runs.len(), 3 * (1 + row_order::PERMUTATIONS));
    for (shard, orders) in category_runs
        .chunks(1 + row_order::PERMUTATIONS)
        .enumerate()
    {
        assert!(
            orders.iter().all(|order| order == &orders[0]),
            "shard {shard}: {orders:?}"
        );
    }

    // The same rows as the file written in random order, which is planned whole.
    let shuffled = env.ok(&[
        "prompts",
        "--dataset",
        "synthetic:42:24",
        "--test",
        "row-order",
    ]);
    let first_line = shuffled.lines().next().unwrap();
    assert!(
        first_line.contains("rows move anywhere within their shard"),
        "{first_line}"
    );
}

#[test]
fn never_seen_tables_written_sorted_or_grouped_are_not_detected() {
    let Some(model) = model_file() else { return };
    let env = Env::new().default_cache();
    // 24 rows: three shards of eight (p can reach 1/8,000; the null needs no more).
    import_sorted(&env, "sorted-by-number", 41, 24, 3);
    import_sorted(&env, "grouped-by-category", 42, 24, 0);
    let spec = env.spec(
        "row-order.toml",
        &format!(
            "name = \"row-order\"\nseed = 0\n\
             datasets = [\"sorted-by-number\", \"grouped-by-category\"]\n\
             tests = [\"row-order\"]\nserializations = [\"the-is\"]\n\n\
             [[models]]\nid = \"smollm2\"\nbackend = \"local\"\nmodel = \"{}\"\n",
            model.display()
        ),
    );
    env.ok(&["run", spec.to_str().unwrap(), "--quiet"]);
    let store = Store::open_read_only(env.cache()).unwrap();
    let cells = store.row_order_cells().unwrap();
    assert_eq!(cells.len(), 2, "{cells:?}");

    // Sorted by a number: refused with the column named, never a p-value.
    let sorted = cells
        .iter()
        .find(|c| c.dataset == "sorted-by-number")
        .unwrap();
    assert!(sorted.stats.is_none(), "{sorted:?}");
    let reason = sorted.skipped.as_deref().unwrap();
    let generated = synth::generate(41, 24);
    let integer_column = generated
        .csv
        .lines()
        .next()
        .unwrap()
        .split(',')
        .nth(3)
        .unwrap();
    assert!(
        reason.contains(&format!("column `{integer_column}`")) && reason.contains("sorted"),
        "{reason}"
    );

    // Grouped by a category: permuted within the groups only, and not detected.
    let grouped = cells
        .iter()
        .find(|c| c.dataset == "grouped-by-category")
        .unwrap();
    let generated = synth::generate(42, 24);
    let category = generated
        .csv
        .lines()
        .next()
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert_eq!(
        grouped.blocked_by,
        vec![category.to_string()],
        "{grouped:?}"
    );
    let stats = grouped
        .stats
        .as_ref()
        .unwrap_or_else(|| panic!("{grouped:?}"));
    assert_eq!(stats.shards, 24 / row_order::SHARD_ROWS);
    assert_eq!(stats.permutations, row_order::PERMUTATIONS);
    assert_eq!(stats.ranks.iter().sum::<usize>(), stats.rank_sum);
    assert!(
        (row_order::rank_sum_tail(stats.rank_sum, stats.shards, stats.permutations)
            - stats.p_value)
            .abs()
            < 1e-12
    );
    assert!(
        stats.p_value > 0.05,
        "a table SmolLM2 never saw came out detected: {stats:?}"
    );
    assert_eq!(grouped.method, "local");

    // Every text was scored once and cached: a second run scores nothing.
    let texts = stats.shards * (1 + stats.permutations);
    let second = env.json(&["run", spec.to_str().unwrap(), "--quiet", "--json"]);
    assert_eq!(second["likelihood"]["scored"], 0, "{second}");
    assert_eq!(second["likelihood"]["cached"], texts as u64, "{second}");

    // The cell reaches scores.json and the HTML and LaTeX reports.
    let out = env.path("report");
    env.ok(&["report", "--out", out.to_str().unwrap()]);
    let scores: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scores.json")).unwrap()).unwrap();
    let json_cells = scores["row_order"].as_array().unwrap();
    assert_eq!(json_cells.len(), 2);
    let json_grouped = json_cells
        .iter()
        .find(|c| c["dataset"] == "grouped-by-category")
        .unwrap();
    // The JSON round trip may change the last bit of a float.
    let json_p_value = json_grouped["stats"]["p_value"].as_f64().unwrap();
    assert!(
        (json_p_value - stats.p_value).abs() < 1e-12,
        "{json_p_value} vs {}",
        stats.p_value
    );
    // Each tested cell joins the report's family: its p beside Holm's p and BH's q.
    let family: Vec<_> = scores["significance"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["test"] == "row-order")
        .collect();
    assert_eq!(family.len(), 1, "{family:?}");
    assert_eq!(family[0]["dataset"], "grouped-by-category");
    let family_p = family[0]["p_value"].as_f64().unwrap();
    assert!((family_p - stats.p_value).abs() < 1e-12);
    assert!(family[0]["q_value"].as_f64().unwrap() >= family_p - 1e-15);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<h2 id=\"row-order\">Row order (test 17)</h2>"));
    assert!(html.contains(&format!("{:.4}", stats.p_value)) || stats.p_value < 1e-4);
    let tex = std::fs::read_to_string(out.join("report.tex")).unwrap();
    assert!(tex.contains("\\section{Row order (test 17)}"));
}
