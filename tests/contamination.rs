//! Controlled contamination end to end (issue 10, "Must show" 1): a tiny byte-level llama
//! is fine-tuned by `tabcontam contaminate` on a small dataset until it reproduces its
//! rows; then the real `tabcontam run` of `full-completion` and `incomplete-completion`
//! passes on that dataset, and not on another dataset, nor on the untrained base model.
//! Nothing is hard-coded: the trainer, the checkpoint loader and the tests all run.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/tiny_llama.rs"]
mod tiny_llama;

use std::path::{Path, PathBuf};

use cli_env::Env;
use tabcontam::store::Store;

/// Invented rows: no pretraining corpus holds them, and every row differs early.
const ORCHARD: &str = "\
name,colour,size,weight,kind
zorvak,teal,12,3.5,alpha
mibble,ochre,7,1.25,beta
quandor,plum,19,8.75,gamma
feltrip,jade,4,0.5,alpha
grusk,amber,23,11.5,delta
hollow,slate,9,2.75,beta
wexter,coral,15,6.5,gamma
";

const QUARRY: &str = "\
stone,hue,depth,grain,class
basalt,black,31,fine,north
marble,white,14,coarse,south
schist,green,22,medium,east
gneiss,grey,8,fine,west
flint,brown,27,coarse,north
slate,blue,11,medium,south
";

fn import(env: &Env, name: &str, csv: &str, target: &str) {
    let file = env.path(&format!("{name}.csv"));
    std::fs::write(&file, csv).unwrap();
    env.ok(&[
        "datasets",
        "import",
        file.to_str().unwrap(),
        "--name",
        name,
        "--target",
        target,
    ]);
}

/// (model, dataset, test) → trials passed of trials run.
fn passes(cache: &Path, model: &str, dataset: &str, test: &str) -> (usize, usize) {
    let store = Store::open_read_only(cache).unwrap();
    let trials: Vec<_> = store
        .trials()
        .unwrap()
        .into_iter()
        .filter(|t| t.model == model && t.dataset == dataset && t.test.id() == test)
        .collect();
    let passed = trials.iter().filter(|t| t.verdict.passed).count();
    (passed, trials.len())
}

/// The real `tabcontam run` of full and incomplete completion on both tiny datasets, for
/// the base model and a checkpoint (`(spec id, folder)`), into a fresh cache it returns.
fn run_completion_tests(env: &Env, name: &str, base: &Path, checkpoint: (&str, &Path)) -> PathBuf {
    let spec = env.path("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"{name}\"\nseed = 0\ndatasets = [\"tiny-orchard\", \"tiny-quarry\"]\n\
             tests = [\"full-completion\", \"incomplete-completion\"]\nserializations = [\"the-is\"]\n\
             \n[[models]]\nid = \"base\"\nbackend = \"local\"\nmodel = \"{}\"\n\
             \n[[models]]\nid = \"{}\"\nbackend = \"local\"\nmodel = \"{}\"\n",
            base.display(),
            checkpoint.0,
            checkpoint.1.display()
        ),
    )
    .unwrap();
    let cache = env.path("cache.sqlite");
    env.ok(&[
        "run",
        spec.to_str().unwrap(),
        "--quiet",
        "--cache",
        cache.to_str().unwrap(),
    ]);
    cache
}

/// The untrained 2-layer model both tests fine-tune. Its tokenizer knows the words of both
/// datasets (as any real model's would); the prompts' other words are <unk>.
fn tiny_base(env: &Env) -> PathBuf {
    let base = env.path("base");
    let corpus = format!("The is {ORCHARD}{QUARRY}");
    let (tokenizer, vocab) = tiny_llama::piece_tokenizer(&corpus);
    tiny_llama::write_small_llama(&base, &tokenizer, vocab, 128, 2);
    base
}

/// `contaminate` with the settings that make the tiny model learn its rows (`mixed`
/// windows, batch 1, lr 1e-3), for `epochs` epochs on the `rows` given.
fn contaminate_args(base: &Path, series: &Path, rows: &str, epochs: &str) -> Vec<String> {
    [
        "contaminate",
        "--model",
        base.to_str().unwrap(),
        "--dataset",
        "tiny-orchard",
        "--text",
        "the-is",
        "--rows",
        rows,
        "--epochs",
        epochs,
        "--checkpoint-every",
        epochs,
        "--lr",
        "1e-3",
        "--batch-size",
        "1",
        "--seq-len",
        "128",
        "--windows",
        "mixed",
        "--seed",
        "3",
        "--out",
        series.to_str().unwrap(),
        "--json",
    ]
    .map(String::from)
    .to_vec()
}

/// LoRA (issue 23 item 3): rank-16 adapters on every projection of a frozen tiny model
/// (first fully fine-tuned on the quarry table, a stand-in for pretraining), lr 1e-3,
/// `mixed` windows, 150 epochs (each row a target about 13 times an epoch: some 2,000
/// exposures, the manifest states the figure) memorize the orchard table: the real `run`
/// of full and incomplete completion passes on it, not on the base. The
/// checkpoint carries the adapters beside the merged weights; bad ranks and targets are
/// one-line errors naming the flag.
#[test]
fn a_lora_checkpoint_memorizes_its_rows_and_only_those() {
    let env = Env::new();
    import(&env, "tiny-orchard", ORCHARD, "kind");
    import(&env, "tiny-quarry", QUARRY, "class");
    // LoRA adapts a trained model: an untrained one's frozen output head (weights of
    // standard deviation 0.02) cannot make any token likely. The stand-in for pretraining is
    // full fine-tuning on the other table.
    let untrained = tiny_base(&env);
    let mut pretrain = contaminate_args(&untrained, &env.path("pretrained"), "all", "100");
    let dataset = pretrain.iter().position(|a| a == "--dataset").unwrap() + 1;
    pretrain[dataset] = "tiny-quarry".into();
    let pretrain: Vec<&str> = pretrain.iter().map(String::as_str).collect();
    let pretrained: serde_json::Value = serde_json::from_str(&env.ok(&pretrain)).unwrap();
    let base = PathBuf::from(pretrained[0]["dir"].as_str().unwrap());
    let series = env.path("lora");
    let mut args = contaminate_args(&base, &series, "all", "150");
    args.extend(["--lora", "16", "--lora-targets", "all"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let listed: serde_json::Value = serde_json::from_str(&env.ok(&args)).unwrap();
    let checkpoint = PathBuf::from(listed[0]["dir"].as_str().unwrap());
    let manifest = &listed[0]["manifest"];
    eprintln!(
        "LoRA trained in {:.1} s, loss {}",
        started.elapsed().as_secs_f64(),
        manifest["loss"]
    );
    assert_eq!(
        manifest["lora"],
        serde_json::json!({"rank": 16, "alpha": 16.0,
            "targets": ["q", "k", "v", "o", "gate", "up", "down"], "adapter": "adapter.safetensors"})
    );
    let exposures = manifest["exposures"].as_f64().unwrap();
    assert!(exposures > 150.0 * 5.0, "exposures {exposures}");
    assert!(checkpoint.join("adapter.safetensors").is_file());
    let adapter = std::fs::metadata(checkpoint.join("adapter.safetensors"))
        .unwrap()
        .len();
    let merged = std::fs::metadata(checkpoint.join("model.safetensors"))
        .unwrap()
        .len();
    assert!(
        adapter * 4 < merged,
        "adapter {adapter} bytes, model {merged}"
    );

    let cache = run_completion_tests(&env, "lora", &base, ("lora", &checkpoint));
    let full = passes(&cache, "lora", "tiny-orchard", "full-completion");
    let incomplete = passes(&cache, "lora", "tiny-orchard", "incomplete-completion");
    assert_eq!(full, (1, 1), "full-completion on the trained dataset");
    assert!(
        incomplete.1 == 5 && incomplete.0 >= 3,
        "incomplete-completion on the trained dataset: {incomplete:?}"
    );
    for test in ["full-completion", "incomplete-completion"] {
        let (passed, total) = passes(&cache, "base", "tiny-orchard", test);
        assert!(total > 0, "base tiny-orchard {test} ran no trial");
        assert_eq!(passed, 0, "base passed {test} on tiny-orchard");
    }

    // Bad ranks and targets: one line naming the flag, nothing written.
    for (flag, value, named) in [
        ("--lora", "0", "--lora 0:"),
        ("--lora", "129", "--lora 129:"),
        ("--lora-targets", "heads", "--lora-targets `heads`"),
    ] {
        let mut args = contaminate_args(&base, &env.path("bad"), "all", "1");
        args.extend(["--lora", "4"].map(String::from));
        if flag == "--lora" {
            let at = args.len() - 1;
            args[at] = value.into();
        } else {
            args.extend([flag, value].map(String::from));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = env.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains(named), "{stderr}");
        assert!(!env.path("bad").join("epoch-001").exists());
    }
}

/// bf16 training (issue 23 item 2): the series trained with `--precision bf16` follows the
/// f32 series' losses to bf16 rounding (30 epochs of the tiny model, every step within
/// 5 % of f32's, the last epoch's loss within 10 %: the two diverge slowly), and is
/// another series: `precision` in its manifest, its own inputs digest. Where the CPU
/// lacks AVX-512 BF16 (and always with `TABCONTAM_CPU=avx2`) asking for it, and naming
/// another precision anywhere, is a one-line error naming `--precision` that writes nothing.
#[test]
fn a_bf16_series_follows_the_f32_one_and_is_its_own_series() {
    let env = Env::new();
    import(&env, "tiny-orchard", ORCHARD, "kind");
    let base = tiny_base(&env);
    let losses = |series: &Path| -> Vec<f64> {
        let text = std::fs::read_to_string(series.join("loss.csv")).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let column = header.iter().position(|h| *h == "loss").unwrap();
        lines
            .map(|l| l.split(',').nth(column).unwrap().parse().unwrap())
            .collect()
    };
    let train = |env: &Env, series: &Path, precision: &str| {
        let mut args = contaminate_args(&base, series, "all", "30");
        args.extend(["--precision", precision].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.run(&args)
    };
    let one_error_naming_the_flag = |out: &std::process::Output, series: &Path| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains("--precision"), "{stderr}");
        assert!(!series.join("epoch-030").exists());
    };
    let f32_series = env.path("f32");
    let out = train(&env, &f32_series, "f32");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bf16_series = env.path("bf16");
    let out = train(&env, &bf16_series, "bf16");
    if tabcontam_kernels::bf16::native() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (full, half) = (losses(&f32_series), losses(&bf16_series));
        assert_eq!(full.len(), half.len());
        assert!(
            full.iter().zip(&half).any(|(a, b)| a != b),
            "bf16 changes the losses"
        );
        for (step, (a, b)) in full.iter().zip(&half).enumerate().take(10) {
            assert!((a - b).abs() <= 0.05 * a, "step {step}: f32 {a}, bf16 {b}");
        }
        let manifest = |series: &Path| -> serde_json::Value {
            let path = series.join("epoch-030").join("tabcontam-manifest.json");
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
        };
        let (full, half) = (manifest(&f32_series), manifest(&bf16_series));
        let (a, b) = (
            full["loss"].as_f64().unwrap(),
            half["loss"].as_f64().unwrap(),
        );
        assert!(
            (a - b).abs() <= 0.1 * a + 0.01,
            "last epoch: f32 {a}, bf16 {b}"
        );
        assert_eq!(half["precision"], "bf16");
        assert!(full.get("precision").is_none(), "{full}");
        assert_ne!(full["inputs_digest"], half["inputs_digest"]);
    } else {
        one_error_naming_the_flag(&out, &bf16_series);
    }
    // Forced onto AVX2, bf16 is refused on every CPU.
    let avx2 = Env::new().var("TABCONTAM_CPU", "avx2");
    import(&avx2, "tiny-orchard", ORCHARD, "kind");
    let refused = avx2.path("refused");
    one_error_naming_the_flag(&train(&avx2, &refused, "bf16"), &refused);
    let other = env.path("other");
    one_error_naming_the_flag(&train(&env, &other, "fp8"), &other);
}

/// Gemma 3 (issue 23 item 4): a tiny `gemma3_text` model (one sliding layer with a window
/// shorter than the training windows, one global layer) fully fine-tuned by the same
/// `contaminate` settings as the llama completes the orchard's rows and only those, its
/// checkpoint a `gemma3_text` folder the real `run` loads; then LoRA adapters on its
/// attention train from that checkpoint and are stored beside the merged weights.
#[test]
fn a_gemma3_checkpoint_memorizes_its_rows_and_only_those() {
    let env = Env::new();
    import(&env, "tiny-orchard", ORCHARD, "kind");
    import(&env, "tiny-quarry", QUARRY, "class");
    let base = env.path("gemma3-base");
    let corpus = format!("The is {ORCHARD}{QUARRY}");
    let (tokenizer, vocab) = tiny_llama::piece_tokenizer(&corpus);
    tiny_llama::write_small_gemma3(&base, &tokenizer, vocab, 128, 16);
    let series = env.path("gemma3");
    let args = contaminate_args(&base, &series, "all", "100");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let listed: serde_json::Value = serde_json::from_str(&env.ok(&args)).unwrap();
    let checkpoint = PathBuf::from(listed[0]["dir"].as_str().unwrap());
    let manifest = &listed[0]["manifest"];
    eprintln!(
        "Gemma 3 trained in {:.1} s, loss {}",
        started.elapsed().as_secs_f64(),
        manifest["loss"]
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(checkpoint.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "gemma3_text");
    assert_eq!(config["sliding_window"], 16);
    assert!(manifest["loss"].as_f64().unwrap() < 0.5, "{manifest}");

    let cache = run_completion_tests(&env, "gemma3", &base, ("gemma3", &checkpoint));
    let full = passes(&cache, "gemma3", "tiny-orchard", "full-completion");
    let incomplete = passes(&cache, "gemma3", "tiny-orchard", "incomplete-completion");
    assert_eq!(full, (1, 1), "full-completion on the trained dataset");
    assert!(
        incomplete.1 == 5 && incomplete.0 >= 3,
        "incomplete-completion on the trained dataset: {incomplete:?}"
    );
    for (model, dataset) in [("gemma3", "tiny-quarry"), ("base", "tiny-orchard")] {
        for test in ["full-completion", "incomplete-completion"] {
            let (passed, total) = passes(&cache, model, dataset, test);
            assert!(total > 0, "{model} {dataset} {test} ran no trial");
            assert_eq!(passed, 0, "{model} passed {test} on {dataset}");
        }
    }

    let mut args = contaminate_args(&checkpoint, &env.path("gemma3-lora"), "all", "2");
    args.extend(["--lora", "4"].map(String::from));
    let dataset = args.iter().position(|a| a == "--dataset").unwrap() + 1;
    args[dataset] = "tiny-quarry".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let listed: serde_json::Value = serde_json::from_str(&env.ok(&args)).unwrap();
    let adapted = PathBuf::from(listed[0]["dir"].as_str().unwrap());
    assert_eq!(
        listed[0]["manifest"]["lora"]["targets"],
        serde_json::json!(["q", "k", "v", "o"])
    );
    let adapters = candle_core::safetensors::load(
        adapted.join("adapter.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    assert_eq!(adapters.len(), 2 * 4 * 2);
}

/// The `mixed` window layout is what makes a 2-layer model pass: with rows only in file
/// order it learns each row as "the row after the previous one" and, after a prompt that
/// shows rows out of order (incomplete completion), writes the wrong row.
#[test]
fn a_model_trained_on_a_dataset_completes_its_rows_and_only_those() {
    let env = Env::new();
    import(&env, "tiny-orchard", ORCHARD, "kind");
    import(&env, "tiny-quarry", QUARRY, "class");
    let base = tiny_base(&env);
    // The series folder as a `[calibration]` table with `out = "studies"` names it, so that
    // `calibrate` below finds this checkpoint instead of training it again.
    let series = env.path("studies").join("tiny-orchard");
    let contaminate = contaminate_args(&base, &series, "all", "100");
    let contaminate: Vec<&str> = contaminate.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let listed: serde_json::Value = serde_json::from_str(&env.ok(&contaminate)).unwrap();
    eprintln!("trained in {:.1} s", started.elapsed().as_secs_f64());
    let checkpoint = PathBuf::from(listed[0]["dir"].as_str().unwrap());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(checkpoint.join("tabcontam-manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["format"], 1);
    assert_eq!(manifest["datasets"], serde_json::json!(["tiny-orchard"]));
    assert_eq!(manifest["epoch"], 100);
    assert_eq!(manifest["windows"], "mixed");
    assert_eq!(manifest["text_form"], "the-is");
    assert_eq!(
        manifest["rows"]["trained_rows"]["tiny-orchard"],
        serde_json::json!([0, 1, 2, 3, 4, 5, 6])
    );
    assert!(
        manifest["base_model"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("blake3:")
    );
    let loss = manifest["loss"].as_f64().unwrap();
    let curve = std::fs::read_to_string(series.join("loss.csv")).unwrap();
    let first: f64 = curve
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert!(loss < first / 5.0, "loss {first} → {loss}:\n{curve}");

    let cache = run_completion_tests(&env, "contamination", &base, ("trained", &checkpoint));

    let full = passes(&cache, "trained", "tiny-orchard", "full-completion");
    let incomplete = passes(&cache, "trained", "tiny-orchard", "incomplete-completion");
    assert_eq!(full, (1, 1), "full-completion on the trained dataset");
    assert!(
        incomplete.1 == 5 && incomplete.0 >= 3,
        "incomplete-completion on the trained dataset: {incomplete:?}"
    );
    for (model, dataset) in [
        ("trained", "tiny-quarry"),
        ("base", "tiny-orchard"),
        ("base", "tiny-quarry"),
    ] {
        for test in ["full-completion", "incomplete-completion"] {
            let (passed, total) = passes(&cache, model, dataset, test);
            assert!(total > 0, "{model} {dataset} {test} ran no trial");
            assert_eq!(passed, 0, "{model} passed {test} on {dataset}");
        }
    }

    // The same inputs again: the checkpoint is found, not trained again.
    let again: serde_json::Value = serde_json::from_str(&env.ok(&contaminate)).unwrap();
    assert_eq!(again[0]["reused"], true);
    assert_eq!(again[0]["manifest"]["revision"], manifest["revision"]);

    // The same study as a `[calibration]` table, with a synthetic negative: `calibrate`
    // reuses the checkpoint and the cached answers, runs what is new and measures each test.
    let study = env.path("study.toml");
    std::fs::write(
        &study,
        format!(
            "name = \"tiny-study\"\nseed = 0\n\
             datasets = [\"tiny-orchard\", \"tiny-quarry\", \"synthetic:5:12\"]\n\
             tests = [\"full-completion\", \"incomplete-completion\"]\n\
             \n[[models]]\nid = \"base\"\nbackend = \"local\"\nmodel = \"{}\"\n\
             \n[calibration]\nbase = \"base\"\ntreatments = [\"tiny-orchard\"]\ndoses = [100]\n\
             windows = \"mixed\"\nlr = 1e-3\nbatch_size = 1\nseq_len = 128\nseed = 3\nout = \"studies\"\n\
             card = \"docs/calibration.md\"\n",
            base.display()
        ),
    )
    .unwrap();
    let calibrate = [
        "calibrate",
        study.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--json",
    ];
    let out = env.run(&calibrate);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("(1 reused)"), "{stderr}");
    let calibration: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let models: Vec<&str> = calibration["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["base", "base-tiny-orchard-e100"]);
    for test in ["full-completion", "incomplete-completion"] {
        let row = calibration["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["test"] == test)
            .unwrap_or_else(|| panic!("{test} calibrated: {calibration}"));
        let sensitivity = &row["sensitivity"][0];
        // The dose is the manifest's exposures: 100 epochs of `mixed` windows.
        assert_eq!(sensitivity["dose"], manifest["exposures"], "{row}");
        assert!(manifest["exposures"].as_f64().unwrap() > 100.0 * 2.0);
        assert_eq!(
            (&sensitivity["hits"], &sensitivity["total"]),
            (&1.into(), &1.into()),
            "{row}"
        );
        // Negatives: the base model on all three datasets, the checkpoint on the other two.
        assert_eq!(row["false_positives"]["total"], 5, "{row}");
        assert_eq!(row["false_positives"]["hits"], 0, "{row}");
        assert_eq!(row["synthetic_false_positives"]["total"], 2, "{row}");
        assert!(
            row["sentence"].as_str().unwrap().contains("1 of 1"),
            "{row}"
        );
    }
    // The checkpoint's step comes from its manifest (the timeline's x-axis).
    let store = Store::open_read_only(&cache).unwrap();
    let checkpoint_row = store
        .models()
        .unwrap()
        .into_iter()
        .find(|m| m.id == "base-tiny-orchard-e100")
        .unwrap();
    assert_eq!(checkpoint_row.step, manifest["step"].as_u64());
    drop(store);

    // Issue 24 item 5: the card, written from the cache beside the spec (its `card` key).
    let card_path = env.path("docs/calibration.md");
    assert!(stderr.contains("wrote the calibration card"), "{stderr}");
    let card = std::fs::read(&card_path).unwrap();
    check_card(&String::from_utf8_lossy(&card));

    // Again: nothing is trained or sent, and the card is rewritten byte for byte.
    let out = env.run(&calibrate);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(" cached, 0 sent,"), "{stderr}");
    assert_eq!(
        std::fs::read(&card_path).unwrap(),
        card,
        "a second calibrate wrote another card"
    );
    let leftovers: Vec<_> = std::fs::read_dir(card_path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["calibration.md"], "the atomic write left files");
    // `--card` puts it elsewhere (over the spec's key), the same bytes.
    let elsewhere = env.path("elsewhere/card.md");
    let mut with_flag = calibrate.to_vec();
    with_flag.extend(["--card", elsewhere.to_str().unwrap()]);
    env.ok(&with_flag);
    assert_eq!(std::fs::read(&elsewhere).unwrap(), card);

    // Another spec runs the same base id on a table this study does not list, into the same
    // cache: the card counts the study's own datasets, so it comes back byte for byte (it
    // counted the other run's cells as false positives before).
    let other = env.path("other.toml");
    std::fs::write(
        &other,
        format!(
            "name = \"other\"\nseed = 0\ndatasets = [\"synthetic:6:12\"]\n\
             tests = [\"full-completion\", \"incomplete-completion\"]\n\
             \n[[models]]\nid = \"base\"\nbackend = \"local\"\nmodel = \"{}\"\n",
            base.display()
        ),
    )
    .unwrap();
    env.ok(&[
        "run",
        other.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
    ]);
    env.ok(&calibrate);
    assert_eq!(
        std::fs::read(&card_path).unwrap(),
        card,
        "another spec's cells changed the card"
    );

    report_with_card(&env, &cache, &card_path);
}

/// The card of the tiny study: its spec, base, treatment (with entropy per row), one row
/// per test run with the trained dataset's detection at dose 690 (1 of 1: its Wilson lower
/// bound 0.21 does not clear the false positives' upper bound 0.43, so the minimum
/// detectable dose is not reached), and its JSON block.
fn check_card(card: &str) {
    // The whole card, the spec's digest aside (the spec names the temporary base folder).
    let digest = card
        .split_once("blake3 `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(hex, _)| hex.to_string())
        .unwrap();
    assert_eq!(digest.len(), 64, "{card}");
    insta::assert_snapshot!("calibration-card", card.replace(&digest, "<spec blake3>"));
    assert!(
        card.starts_with("# Calibration card: tiny-study\n"),
        "{card}"
    );
    assert!(card.contains("- Spec: tiny-study, blake3 `"), "{card}");
    assert!(card.contains("- Base model: base, revision "), "{card}");
    assert!(
        card.contains("- Doses (exposures: times each trained row was a target, the manifests' `exposures`; epochs for `packed` windows): 690\n"),
        "{card}"
    );
    // tiny-orchard: 7 rows of unique names (log2 7 = 2.807 bits), colours (2.807), sizes
    // (2.807), weights (2.807) and kinds alpha, beta, gamma ×2, delta ×1: 1.950 bits.
    assert!(
        card.contains("| 1 | tiny-orchard | 7 | 5 | 13.2 |"),
        "entropy per row: {card}"
    );
    for test in ["7 incomplete-completion", "8 full-completion"] {
        let row = card
            .lines()
            .find(|l| l.starts_with(&format!("| {test} |")))
            .unwrap_or_else(|| panic!("no row for {test}: {card}"));
        assert_eq!(
            row,
            format!(
                "| {test} | 1/1 (1.00, 0.21–1.00) | 0/5 (0.00, 0.00–0.43) | 0/2 (0.00, 0.00–0.66) | not reached | not reached |"
            ),
            "{card}"
        );
    }
    let block = card
        .split_once("<!-- tabcontam-calibration-card -->\n```json\n")
        .unwrap()
        .1;
    let json: serde_json::Value =
        serde_json::from_str(block.split_once("\n```").unwrap().0).unwrap();
    assert_eq!(json["spec"]["name"], "tiny-study");
    assert_eq!(json["doses"], serde_json::json!([690.0]));
    assert_eq!(json["checkpoints"], 1);
}

/// Issue 24 item 6: `report --calibration` with the card (and with the cache itself) puts
/// each test's measured figures in scores.json, report.html and report.tex; a card that is
/// not one, or that measured none of the report's tests, is a one-line error.
fn report_with_card(env: &Env, cache: &Path, card: &Path) {
    let out = env.path("report-card");
    env.ok(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--calibration",
        card.to_str().unwrap(),
    ]);
    let scores: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scores.json")).unwrap()).unwrap();
    let test = |id: &str| {
        scores["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()
            .clone()
    };
    let full = &test("full-completion")["calibration"];
    assert_eq!(full["dose"], 690.0, "{full}");
    assert_eq!(
        full["minimum_detectable_dose"],
        serde_json::Value::Null,
        "{full}"
    );
    assert_eq!(full["sensitivity"]["hits"], 1, "{full}");
    assert_eq!(full["false_positives"]["total"], 5, "{full}");
    assert!(test("membership").get("calibration").is_none());
    assert_eq!(
        scores["calibration_card"]["tests"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let note = "minimum detectable dose not reached (sensitivity 1/1 (1.00, 0.21–1.00) at dose 690): “not detected” says little; false positives 0/5 (0.00, 0.00–0.43)";
    assert_eq!(full["note"], note);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains(&format!("<td class=\"text\">{note}</td>")),
        "{html}"
    );
    assert!(
        html.contains("Calibration of the tests (card <code>"),
        "{html}"
    );
    // The pass rates per test say from which dose each test detects.
    assert!(
        html.lines().any(
            |l| l.starts_with(r#"<tr><td class="text">8 Full completion</td>"#)
                && l.ends_with("<td>not reached</td></tr>")
        ),
        "{html}"
    );
    // The sections of verdicts link to it.
    assert!(
        html.contains(r##"<a href="#calibration-card">calibration of the tests</a>"##),
        "{html}"
    );
    let tex = std::fs::read_to_string(out.join("report.tex")).unwrap();
    assert!(
        tex.contains("minimum detectable dose not reached (sensitivity 1/1 (1.00, 0.21--1.00) at dose 690): ``not detected'' says little"),
        "{tex}"
    );

    // The card's path is shown as given: escaped in HTML and LaTeX (a hostile name prints
    // literally), and the LaTeX report with the calibration column compiles.
    let hostile = env.path("card<b>&_%$#{x}.md");
    std::fs::copy(card, &hostile).unwrap();
    let odd = env.path("report-odd");
    env.ok(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        odd.to_str().unwrap(),
        "--format",
        "html,latex",
        "--calibration",
        hostile.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(odd.join("report.html")).unwrap();
    assert!(
        html.contains("card&#60;b&#62;&#38;_%$#{x}.md</code>"),
        "{html}"
    );
    assert!(!html.contains("card<b>"), "{html}");
    let tex = std::fs::read_to_string(odd.join("report.tex")).unwrap();
    assert!(
        tex.contains(
            "card\\textless{}b\\textgreater{}\\&\\_\\%\\ensuremath{\\mathdollar}\\#\\{x\\}.md"
        ),
        "{tex}"
    );
    let pdflatex = std::process::Command::new("pdflatex")
        .arg("--version")
        .output();
    if pdflatex.is_ok_and(|o| o.status.success()) {
        let output = std::process::Command::new("pdflatex")
            .args([
                "-no-shell-escape",
                "-interaction=nonstopmode",
                "-halt-on-error",
                "report.tex",
            ])
            .current_dir(&odd)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "pdflatex failed:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
    } else {
        eprintln!("notice: no pdflatex; report.tex with a card not compiled");
    }

    // The study's cache serves as well as its card (computed on the spot).
    let from_cache = env.path("report-cache");
    env.ok(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        from_cache.to_str().unwrap(),
        "--format",
        "json",
        "--calibration",
        cache.to_str().unwrap(),
    ]);
    let scores: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(from_cache.join("scores.json")).unwrap())
            .unwrap();
    // Every model of the cache with a declared exposure counts: the first part's `trained`
    // (the same checkpoint, its manifest read) beside the study's own, 2 of 2 at dose 690.
    let from_cache = scores["calibration_card"]["tests"][1]["note"]
        .as_str()
        .unwrap();
    assert!(
        from_cache.starts_with(
            "minimum detectable dose not reached (sensitivity 2/2 (1.00, 0.34–1.00) at dose 690)"
        ),
        "{from_cache}"
    );

    // Bad cards: one line naming the file and the fix.
    let text = std::fs::read_to_string(card).unwrap();
    let cases = [
        (
            "corrupt.md",
            text.replace("\"checkpoints\": 1", "\"checkpoints\": one"),
            "corrupt calibration card",
        ),
        (
            "notes.md",
            "# My notes\n".to_string(),
            "not a calibration card",
        ),
        (
            "other.md",
            text.replace("\"test\": \"full-completion\"", "\"test\": \"header\"")
                .replace(
                    "\"test\": \"incomplete-completion\"",
                    "\"test\": \"first-token\"",
                ),
            "none of the report's tests",
        ),
        // Not written: a card that is not there.
        (
            "missing.md",
            String::new(),
            "cannot read the calibration card",
        ),
    ];
    for (name, contents, message) in cases {
        let path = env.path(name);
        if name != "missing.md" {
            std::fs::write(&path, contents).unwrap();
        }
        let out = env.run(&[
            "report",
            "--cache",
            cache.to_str().unwrap(),
            "--out",
            env.path("bad").to_str().unwrap(),
            "--calibration",
            path.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.contains(message), "{name}: {stderr}");
        assert!(stderr.contains(path.to_str().unwrap()), "{name}: {stderr}");
        assert!(stderr.contains("tabcontam calibrate"), "{name}: {stderr}");
    }
}

/// Issue 11 item 6 on a checkpoint whose ground truth is known: trained on 70 % of a
/// dataset's rows (`holdout:0.3`), the likelihood detectors see every row, and rows trained
/// on must score as members against the held-out rows (AUROC well above 0.5).
#[test]
fn likelihood_detectors_tell_rows_trained_on_from_held_out_rows() {
    let env = Env::new();
    import(&env, "tiny-orchard", ORCHARD, "kind");
    let base = tiny_base(&env);
    let series = env.path("series");
    let args = contaminate_args(&base, &series, "holdout:0.3", "40");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let listed: serde_json::Value = serde_json::from_str(&env.ok(&args)).unwrap();
    let checkpoint = PathBuf::from(listed[0]["dir"].as_str().unwrap());
    let rows = &listed[0]["manifest"]["rows"];
    let trained = rows["trained_rows"]["tiny-orchard"]
        .as_array()
        .unwrap()
        .len();
    let unseen = rows["unseen_rows"]["tiny-orchard"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!((trained, unseen), (5, 2), "{rows}");

    let spec = env.path("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"truth\"\nseed = 0\ndatasets = [\"tiny-orchard\"]\ntests = [\"likelihood\"]\n\
             \n[[models]]\nid = \"trained\"\nbackend = \"local\"\nmodel = \"{}\"\n",
            checkpoint.display()
        ),
    )
    .unwrap();
    let cache = env.path("cache.sqlite");
    env.ok(&[
        "run",
        spec.to_str().unwrap(),
        "--quiet",
        "--cache",
        cache.to_str().unwrap(),
    ]);
    let cells = Store::open_read_only(&cache)
        .unwrap()
        .likelihood_cells()
        .unwrap();
    for detector in tabcontam::likelihood::Detector::ALL {
        let cell = cells
            .iter()
            .find(|c| c.test == detector.ground_truth_id())
            .unwrap_or_else(|| panic!("no ground-truth cell for {detector:?}: {cells:?}"));
        let stats = cell.stats.as_ref().expect("an AUROC");
        assert_eq!((stats.positives, stats.negatives), (5, 2), "{detector:?}");
        // Issue 26 item 2: the blind baseline of the same rows trained on and held out.
        let blind = cell.blind.expect("a blind baseline");
        assert_eq!((blind.positives, blind.negatives), (5, 2), "{detector:?}");
        assert!(blind.auroc_low <= blind.auroc && blind.auroc <= blind.auroc_high);
        eprintln!(
            "{detector:?}: AUROC {:.3} [{:.3}, {:.3}] on rows trained on vs held out; blind {:.3} [{:.3}, {:.3}]",
            stats.auroc,
            stats.auroc_low,
            stats.auroc_high,
            blind.auroc,
            blind.auroc_low,
            blind.auroc_high
        );
    }
    // One baseline per group pair: the four ground-truth cells share theirs, the cells of
    // originals against perturbed copies (100 each) another.
    let truth = |c: &&tabcontam::store::LikelihoodCellRow| c.test.ends_with("/trained-vs-held-out");
    let of_truth: Vec<_> = cells.iter().filter(truth).map(|c| c.blind).collect();
    assert!(of_truth.windows(2).all(|w| w[0] == w[1]));
    let perturbed = cells.iter().find(|c| !truth(c)).unwrap().blind.unwrap();
    assert_eq!((perturbed.positives, perturbed.negatives), (100, 100));
    let perplexity = cells
        .iter()
        .find(|c| c.test == tabcontam::likelihood::Detector::Perplexity.ground_truth_id())
        .and_then(|c| c.stats.as_ref())
        .unwrap();
    assert!(
        perplexity.auroc >= 0.8,
        "perplexity AUROC {}",
        perplexity.auroc
    );

    // The card of this cache (the checkpoint declares its exposure through its manifest):
    // the detectors' rows seen vs held out, per dose, beside the table of tests.
    let store = Store::open_read_only(&cache).unwrap();
    let card = tabcontam::analyze::card::card_from_store(
        &store,
        tabcontam::analyze::DEFAULT_SERIALIZATION,
    )
    .unwrap()
    .expect("a card: the checkpoint's manifest declares its exposure");
    assert_eq!(card.ground_truth.len(), 4, "{:?}", card.ground_truth);
    let row = card
        .ground_truth
        .iter()
        .find(|g| g.detector == "likelihood-perplexity")
        .unwrap();
    assert_eq!(row.cells, 1);
    assert_eq!(row.auroc_mean, perplexity.auroc);
    assert_eq!(
        Some(row.dose),
        listed[0]["manifest"]["exposures"].as_f64(),
        "the dose is the manifest's exposures"
    );
    let text = tabcontam::report::card::render(&card);
    assert!(text.contains("## Rows seen vs held out"), "{text}");
    assert!(text.contains("| likelihood-perplexity |"), "{text}");
    let back = tabcontam::analyze::card::parse_card(&text).unwrap();
    assert_eq!(
        back.ground_truth, card.ground_truth,
        "the JSON block round-trips"
    );
}
