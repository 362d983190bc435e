//! `tabcontam prompts`: the exact prompts a run would send.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::PromptsArgs;
use crate::dataset::Serialization;
use crate::dataset::catalog::Catalog;
use crate::likelihood::row_order;
use crate::probe::{self, ProbeContext, PromptPack, TestId, Variant};

pub fn run(args: PromptsArgs) -> anyhow::Result<ExitCode> {
    if args.test == row_order::TEST_ID {
        return row_order_texts(&args);
    }
    let test = TestId::parse_or_explain(&args.test)?;
    let serialization = Serialization::resolve(&args.serialization)?;
    let pack = match &args.prompt_pack {
        Some(path) => PromptPack::load(path)?,
        None => PromptPack::builtin(),
    };
    let variant = Variant::parse(&args.variant).with_context(|| {
        format!(
            "unknown --variant {:?}: use `paper` (the paper's text, default) or `paper-code` (the authors' code)",
            args.variant
        )
    })?;
    let catalog = Catalog::open(args.data.data_dir.as_deref())?;
    let dataset = catalog.load(&args.dataset)?;
    let ctx = ProbeContext {
        dataset: &dataset,
        serialization: &serialization,
        seed: args.seed,
        pack: &pack,
        variant,
    };
    let built = probe::build(test, &ctx)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &built.prompts)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(reason) = &built.skipped {
        writeln!(out, "{test} on {}: skipped ({reason})", dataset.id)?;
    }
    for prompt in &built.prompts {
        let note = prompt
            .note
            .as_deref()
            .map(|n| format!(", {n}"))
            .unwrap_or_default();
        writeln!(
            out,
            "=== {} #{} on {} ({} file, {variant} variant), max {} tokens{note} ===",
            prompt.test, prompt.trial, prompt.dataset, dataset.variant, prompt.max_tokens
        )?;
        writeln!(out, "{}", prompt.text)?;
        writeln!(
            out,
            "--- expected: {}",
            serde_json::to_string(&prompt.expected)?
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Test 17 scores texts instead of sending prompts: its plan (what may be permuted, or why
/// nothing may) and every text it scores, each shard in file order first.
fn row_order_texts(args: &PromptsArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::open(args.data.data_dir.as_deref())?;
    let dataset = catalog.load(&args.dataset)?;
    let plan = row_order::plan(&dataset.table, &dataset.id, args.seed);
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = match &plan {
            Ok(plan) => serde_json::json!({
                "dataset": dataset.id,
                "blocked_by": plan.blocked_by,
                "ordered": plan.ordered,
                "shards": plan.shards.iter().map(|shard| serde_json::json!({
                    "rows": shard.rows,
                    "texts": std::iter::once(&shard.rows)
                        .chain(&shard.permutations)
                        .map(|rows| row_order::shard_text(&dataset.table, rows))
                        .collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            }),
            Err(reason) => serde_json::json!({"dataset": dataset.id, "skipped": reason}),
        };
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let plan = match plan {
        Ok(plan) => plan,
        Err(reason) => {
            writeln!(out, "row-order on {}: skipped ({reason})", dataset.id)?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    let scope = match plan.blocked_by.is_empty() {
        true => "rows move anywhere within their shard".to_string(),
        false => format!(
            "rows move only within runs of equal {} ({})",
            plan.blocked_by.join(", "),
            plan.ordered
                .iter()
                .map(|o| format!("`{}` {}, z = {:.1}", o.column, o.pattern, o.z))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    writeln!(
        out,
        "row-order on {}: {} shards of {} rows, {} permutations each; {scope}",
        dataset.id,
        plan.shards.len(),
        row_order::SHARD_ROWS,
        row_order::PERMUTATIONS
    )?;
    for (index, shard) in plan.shards.iter().enumerate() {
        let orders = std::iter::once(&shard.rows).chain(&shard.permutations);
        for (j, rows) in orders.enumerate() {
            let label = match j {
                0 => "file order".to_string(),
                _ => format!("permutation {j}"),
            };
            writeln!(
                out,
                "=== shard {} (rows {}–{}), {label}: {rows:?} ===",
                index + 1,
                shard.rows[0],
                shard.rows[shard.rows.len() - 1]
            )?;
            write!(out, "{}", row_order::shard_text(&dataset.table, rows))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
