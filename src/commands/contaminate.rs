//! `tabcontam contaminate`: fine-tune a local model on datasets and write checkpoints.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::cli::ContaminateArgs;
use crate::infer::fetch::{Mirrors, ensure_model_in, known_model, models_dir};
use crate::train::{self, ContaminationSettings, RowSelection, TextForm, WindowLayout};

pub fn run(args: ContaminateArgs) -> anyhow::Result<ExitCode> {
    // A known model's name (the default, `gemma3-270m`) is its file, fetched once, as in a
    // spec; anything else is a path.
    let model = match known_model(&args.model).filter(|known| known.name == args.model) {
        Some(known) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(ensure_model_in(known, &models_dir(), &Mirrors::from_env()))?,
        None => PathBuf::from(&args.model),
    };
    let mut settings = ContaminationSettings::new(model, args.datasets, args.out);
    settings.data_dir = args.data.data_dir;
    settings.text = TextForm::parse(&args.text)?;
    settings.rows = RowSelection::parse(&args.rows)?;
    settings.epochs = args.epochs;
    settings.checkpoint_every = args.checkpoint_every;
    settings.learning_rate = args.lr;
    settings.weight_decay = args.weight_decay;
    settings.batch_size = args.batch_size;
    settings.grad_accum = args.grad_accum;
    settings.seq_len = args.seq_len;
    settings.windows = WindowLayout::parse(&args.windows)?;
    settings.seed = args.seed;
    if !(args.resume_every.is_finite() && args.resume_every >= 0.0) {
        anyhow::bail!(
            "--resume-every {}: give a number of seconds, 0 or more (e.g. 300)",
            args.resume_every
        );
    }
    settings.resume_every = std::time::Duration::from_secs_f64(args.resume_every);
    settings.max_grad_norm = args.max_grad_norm;
    settings.precision = train::linear::Precision::parse(&args.precision)
        .map_err(|e| anyhow::anyhow!("--precision: {e}"))?;
    settings.lr_schedule = train::schedule::LrSchedule::parse(&args.lr_schedule)
        .map_err(|e| anyhow::anyhow!("--lr-schedule: {e}"))?;
    if let Some(rank) = args.lora {
        settings.lora = Some(train::lora::LoraSettings::from_options(
            rank,
            Some(&args.lora_targets),
            args.lora_alpha,
        )?);
    }
    let started = Instant::now();
    let checkpoints = train::build_checkpoints(&settings, &mut |line| eprintln!("{line}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let list: Vec<_> = checkpoints
            .iter()
            .map(|c| {
                serde_json::json!({
                    "dir": c.dir,
                    "reused": c.reused,
                    "manifest": c.manifest,
                })
            })
            .collect();
        serde_json::to_writer_pretty(&mut out, &list)?;
        writeln!(out)?;
    } else {
        for c in &checkpoints {
            writeln!(
                out,
                "{}  epoch {} step {} loss {:.4} revision {}{}",
                c.dir.display(),
                c.manifest.epoch,
                c.manifest.step,
                c.manifest.loss,
                c.manifest.revision,
                if c.reused { " (cached)" } else { "" }
            )?;
        }
        writeln!(
            out,
            "{} checkpoint(s) in {:.1} s",
            checkpoints.len(),
            started.elapsed().as_secs_f64()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
