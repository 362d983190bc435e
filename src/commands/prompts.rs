//! `tabcontam prompts`: the exact prompts a run would send.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::PromptsArgs;
use crate::dataset::Serialization;
use crate::dataset::catalog::Catalog;
use crate::probe::{self, ProbeContext, PromptPack, TestId, Variant};

pub fn run(args: PromptsArgs) -> anyhow::Result<ExitCode> {
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
