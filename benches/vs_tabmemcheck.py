"""Side by side with the peer: tabmemcheck 0.1.6 (Bordt et al., "Elephants never forget")
and tabcontam's verbatim tests 13-16 on the same llama.cpp server, model and CSV files.

Starts llama.cpp's `llama-server` with the SmolLM2 GGUF on a loopback port, then for each
dataset and each of the four verbatim tests runs
  - tabmemcheck's test (header_test, row_completion_test, feature_completion_test,
    first_token_test) through its OpenAI client (base_url = the server), seeded; and
  - `tabcontam run` with a one-dataset, one-test spec pointing at the same server, on a
    fresh cache (nothing cached), then `tabcontam report --format json` for the outcome;
and then each tool a second time (the rerun: tabcontam answers from its cache, tabmemcheck
has none and asks the model again). Prints one table row per test and dataset (outcome of
each tool, wall time of each, ratio = tabmemcheck / tabcontam) and writes the same as JSON.

Run it with the tabmemcheck venv's interpreter (scripts/ci-install-tabmemcheck.sh):

  ~/.cache/tabcontam-test-assets/venv-tabmemcheck/bin/python benches/vs_tabmemcheck.py \
      --tabcontam $CARGO_TARGET_DIR/release/tabcontam [--datasets iris,titanic] [--trials 10]

`just vs-tabmemcheck` does exactly that. docs/vs-tabmemcheck.md explains the differences
between the two tools' prompts and decision rules (the `note` column).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSETS = Path(
    os.environ.get("TABCONTAM_TEST_ASSETS") or Path.home() / ".cache/tabcontam-test-assets"
)
MODEL_NAME = "SmolLM2-135M-Instruct"
# tabcontam's ids of the verbatim tests (SPEC §8), in the order of the table.
TESTS = ["header", "row-completion", "feature-completion-verbatim", "first-token"]

# Why the two tools can disagree on the same model and file: prompt and decision rule.
NOTES = {
    "header": "tabmemcheck: cuts in rows 2,4,6,8 (4 queries), keeps the best match length, "
    "no decision; tabcontam: 5 seeded cuts in lines 2-8, detected only when the match "
    "exceeds what copying from the prompt explains by a whole field",
    "row-completion": "tabmemcheck: random 10-row windows (header counted as a row), "
    "match = expected row contained in the first output line; tabcontam: seeded windows "
    "whose next row is not among the shown ones, match = first line equals the row",
    "feature-completion-verbatim": "tabmemcheck: 'Name = value' serialization with 5 "
    "few-shot rows, most-unique column (row ids included); tabcontam: raw CSV rows with the "
    "feature moved last, most-unique column excluding row ids",
    "first-token": "tabmemcheck: first n characters of the raw line (n so that no token "
    "covers half the rows), skipped when xgboost/logistic regression predict it from 1-5 "
    "previous rows (unseeded); tabcontam: first field cut to 4 characters, skipped when "
    "'repeat previous' or 'continue the step' predicts >= 50 % of rows",
}


def log(message: str) -> None:
    print(f"vs_tabmemcheck: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# the server
# ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary: Path, model: Path, port: int, log_path: Path, threads: int):
    """llama-server as tests/real_server.rs starts it, with a context large enough for the
    peer's prompts (its row prompts are 10 rows plus up to 1000 generated tokens)."""
    out = open(log_path, "wb")
    proc = subprocess.Popen(
        [
            str(binary),
            "-m", str(model),
            "--host", "127.0.0.1", "--port", str(port),
            "-c", "8192", "-np", "2", "-t", str(threads),
            "--no-webui",
        ],
        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited early; see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise SystemExit(f"llama-server not ready after 180 s; see {log_path}")


# ---------------------------------------------------------------------------------------
# tabmemcheck
# ---------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def peer_llm(port: int, api: str):
    import tabmemcheck
    from openai import OpenAI

    # The peer's own OpenAI setup, pointed at the loopback server (no key is checked).
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    return tabmemcheck.llm.OpenAILLM(client, MODEL_NAME, chat_mode=(api == "chat"))


def run_peer(test: str, csv: Path, llm, trials: int, seed: int, max_tokens: int | None):
    """One tabmemcheck test; returns (outcome text, numbers, seconds, captured stdout)."""
    import numpy as np
    import tabmemcheck

    if max_tokens is not None:
        tabmemcheck.config.max_tokens = max_tokens
    # Its first-token randomness check draws from the global generator, unseeded.
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    captured = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(captured):
        if test == "header":
            prompt, truth, answer = tabmemcheck.header_test(str(csv), llm, rng=rng)
            result = None
        elif test == "row-completion":
            truth, answers = tabmemcheck.row_completion_test(
                str(csv), llm, num_queries=trials, rng=rng, print_levenshtein=False
            )
        elif test == "feature-completion-verbatim":
            truth, answers = tabmemcheck.feature_completion_test(
                str(csv), llm, num_queries=trials, rng=rng
            )
        elif test == "first-token":
            tabmemcheck.first_token_test(str(csv), llm, num_queries=trials, rng=rng)
    seconds = time.perf_counter() - started
    text = ANSI.sub("", captured.getvalue())

    if test == "header":
        matched = 0
        for a, b in zip(truth or "", answer or ""):
            if a != b:
                break
            matched += 1
        return f"{matched} chars", {"matched_chars": matched}, seconds, text
    if test == "row-completion":
        exact = sum(t.strip() in a.strip() for t, a in zip(truth, answers))
        return f"{exact}/{len(truth)} rows", {"exact": exact, "trials": len(truth)}, seconds, text
    if test == "feature-completion-verbatim":
        feature = re.search(r'Feature Completion Test \("(.*?)"\)', text)
        exact = sum(str(t) == str(a) for t, a in zip(truth, answers))
        name = feature.group(1) if feature else "?"
        return (
            f"{exact}/{len(truth)} ({name})",
            {"exact": exact, "trials": len(truth), "feature": name},
            seconds,
            text,
        )
    # first token: the peer returns nothing and prints its result.
    if "Aborting the first token test" in text:
        return "skipped (not random)", {"skipped": True}, seconds, text
    hits = re.search(r"First Token Test: (\d+)/(\d+) exact matches", text)
    base = re.search(r"most common first token\): (\d+)/(\d+)", text)
    if not hits:
        return "no result", {}, seconds, text
    exact, n = int(hits.group(1)), int(hits.group(2))
    baseline = int(base.group(1)) if base else None
    return (
        f"{exact}/{n} (baseline {baseline}/{n})",
        {"exact": exact, "trials": n, "baseline": baseline},
        seconds,
        text,
    )


# ---------------------------------------------------------------------------------------
# tabcontam
# ---------------------------------------------------------------------------------------


def tabcontam_spec(dataset: str, test: str, port: int, api: str, seed: int) -> str:
    return f"""name = "vs-tabmemcheck-{dataset}-{test}"
seed = {seed}
datasets = ["{dataset}"]
tests = ["{test}"]
serializations = ["the-is"]

[[models]]
id = "smollm2-135m-server"
backend = "openai-compatible"
api = "{api}"
base_url = "http://127.0.0.1:{port}/v1"
model = "{MODEL_NAME}"
concurrency = 2
"""


def timed(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - started, done


def find_cells(scores: object, dataset: str, test: str) -> list[dict]:
    """Every object in scores.json that names this dataset and test (the layout of the
    verbatim section is read loosely: any dict with matching `dataset` and `test`)."""
    found = []
    stack = [scores]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("dataset") == dataset and item.get("test") == test:
                found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def describe_cell(cell: dict) -> str:
    """One line for a verbatim cell of scores.json: verdict, count or length, chance, p."""
    if cell.get("skipped"):
        reason = cell["skipped"]
        return f"skipped ({reason})" if isinstance(reason, str) else "skipped"
    verdict = "detected" if cell.get("passed") else "not detected"
    if cell.get("test") == "header":
        return f"{verdict}: {cell.get('score', 0):.0f} chars"
    text = f"{verdict}: {cell.get('passed_trials')}/{cell.get('trials')} exact"
    extra = []
    if cell.get("chance") is not None:
        extra.append(f"chance {cell['chance']:.2f}")
    if cell.get("p_value") is not None:
        extra.append(f"p {cell['p_value']:.2g}")
    return text + (f" ({', '.join(extra)})" if extra else "")


def run_ours(binary: Path, work: Path, dataset: str, test: str, port: int, api: str, seed: int):
    """`tabcontam run` on a fresh cache, its rerun, and the outcome from the report."""
    spec = work / f"{dataset}-{test}.toml"
    spec.write_text(tabcontam_spec(dataset, test, port, api, seed))
    cache = work / f"{dataset}-{test}.sqlite"
    for stale in work.glob(f"{dataset}-{test}.sqlite*"):
        stale.unlink()
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    cmd = [str(binary), "run", str(spec), "--cache", str(cache), "--quiet", "--json"]
    first, done = timed(cmd, env)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        # No timing: a run that stops at its spec says nothing about speed.
        return {"outcome": f"n/a: {reason[:160]}", "seconds": None, "rerun_seconds": None}
    rerun, again = timed(cmd, env)
    sent_again = None
    try:
        sent_again = json.loads(again.stdout)["counts"]["sent"]
    except (ValueError, KeyError, TypeError):
        pass
    out = work / f"{dataset}-{test}-report"
    report = subprocess.run(
        [str(binary), "report", "--cache", str(cache), "--format", "json", "--out", str(out)],
        capture_output=True, text=True, env=env,
    )
    outcome, cells = "no verbatim cell in scores.json", []
    scores_path = out / "scores.json"
    if report.returncode == 0 and scores_path.is_file():
        cells = find_cells(json.loads(scores_path.read_text()), dataset, test)
        # The cell itself (it has `trials`), not one of its trials listed elsewhere.
        whole = [c for c in cells if "trials" in c or "skipped" in c]
        if whole:
            outcome = describe_cell(whole[0])
    elif report.returncode != 0:
        outcome = "report failed: " + (report.stderr.strip().splitlines() or ["?"])[-1][:120]
    return {
        "outcome": outcome,
        "cells": cells,
        "seconds": first,
        "rerun_seconds": rerun,
        "rerun_sent": sent_again,
    }


# ---------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------


def ratio(peer: float | None, ours: float | None) -> str:
    if peer is None or ours is None or ours <= 0:
        return "-"
    return f"{peer / ours:.2f}x"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(rows: list[dict]) -> str:
    head = (
        "| dataset | test | tabmemcheck | tabcontam | tabmemcheck s | tabcontam s | ratio | "
        "rerun tabmemcheck s | rerun tabcontam s | rerun ratio |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        p, o = r["tabmemcheck"], r["tabcontam"]
        lines.append(
            f"| {r['dataset']} | {r['test']} | {p['outcome']} | {o['outcome']} | "
            f"{seconds(p['seconds'])} | {seconds(o['seconds'])} | {ratio(p['seconds'], o['seconds'])} | "
            f"{seconds(p['rerun_seconds'])} | {seconds(o['rerun_seconds'])} | "
            f"{ratio(p['rerun_seconds'], o['rerun_seconds'])} |"
        )
    return head + "\n".join(lines) + "\n"


def write_results(out: Path, settings: dict, rows: list[dict], tests: list[str]):
    """vs_tabmemcheck.json and .md, rewritten after every row so a long run that is stopped
    keeps what it measured."""
    (out / "vs_tabmemcheck.json").write_text(
        json.dumps({"settings": settings, "rows": rows}, indent=2, default=str)
    )
    table = markdown(rows)
    notes = "\n".join(f"- `{t}`: {NOTES[t]}" for t in tests)
    (out / "vs_tabmemcheck.md").write_text(table + "\n" + notes + "\n")
    return table, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tabcontam", type=Path, required=True, help="the tabcontam binary")
    parser.add_argument("--datasets", default="iris,titanic", help="shipped datasets (comma list)")
    parser.add_argument("--tests", default=",".join(TESTS), help="verbatim test ids (comma list)")
    parser.add_argument("--trials", type=int, default=25, help="tabmemcheck's num_queries [25]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--api", choices=["completions", "chat"], default="completions",
                        help="both tools: raw completion (base-model setting) or chat")
    parser.add_argument("--peer-max-tokens", default="match",
                        help="tabmemcheck.config.max_tokens: `match` (default) gives it "
                        "tabcontam's budget of the same test (header 400, feature "
                        "completion 32), `peer` keeps its own 1000, or a number")
    parser.add_argument("--no-rerun", action="store_true", help="skip the second run of each")
    parser.add_argument("--threads", type=int, default=1,
                        help="llama-server threads [1: its spinning threads collapse on a "
                        "busy 2-core machine]")
    parser.add_argument("--server", type=Path, default=ASSETS / "bin/llama-server")
    parser.add_argument("--model", type=Path,
                        default=ASSETS / "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for vs_tabmemcheck.json/.md and logs [a temp folder]")
    args = parser.parse_args()

    for path, what in ((args.tabcontam, "tabcontam binary"), (args.server, "llama-server"),
                       (args.model, "GGUF model")):
        if not path.is_file():
            raise SystemExit(f"vs_tabmemcheck: {what} not found: {path}")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    out = args.out or Path(tempfile.mkdtemp(prefix="vs-tabmemcheck-"))
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    # tabmemcheck writes chatlogs/ under the working directory when logging is on.
    os.chdir(work)

    datasets = [d for d in args.datasets.split(",") if d]
    tests = [t for t in args.tests.split(",") if t]
    for test in tests:
        if test not in TESTS:
            raise SystemExit(f"vs_tabmemcheck: --tests: unknown test `{test}` (one of {TESTS})")
    csvs = {}
    for d in datasets:
        csv = REPO / "datasets" / f"{d}.csv"
        if not csv.is_file():
            raise SystemExit(f"vs_tabmemcheck: --datasets: no shipped CSV {csv} (with header)")
        csvs[d] = csv

    settings = {"api": args.api, "trials": args.trials, "seed": args.seed,
                "peer_max_tokens": args.peer_max_tokens, "model": args.model.name,
                "server_threads": args.threads, "tabmemcheck": peer_version()}
    # A terminated benchmark still stops its server (the `finally` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    port = free_port()
    log(f"starting llama-server on 127.0.0.1:{port}")
    server = start_server(args.server, args.model, port, out / "llama-server.log", args.threads)
    rows = []
    try:
        llm = peer_llm(port, args.api)
        # One request first so neither tool pays for the server's first-call warm-up.
        llm.completion("a,b,c\n1,2,3\n", 0.0, 4)
        for d in datasets:
            for test in tests:
                log(f"{d} / {test}: tabmemcheck")
                budget = peer_budget(args.peer_max_tokens, test)
                outcome, numbers, secs, text = run_peer(
                    test, csvs[d], llm, args.trials, args.seed, budget
                )
                (out / f"tabmemcheck-{d}-{test}.log").write_text(text)
                peer = {"outcome": outcome, "numbers": numbers, "seconds": secs,
                        "rerun_seconds": None}
                if not args.no_rerun:
                    log(f"{d} / {test}: tabmemcheck rerun")
                    again, _, peer["rerun_seconds"], _ = run_peer(
                        test, csvs[d], llm, args.trials, args.seed, budget
                    )
                    peer["rerun_outcome"] = again
                log(f"{d} / {test}: tabcontam")
                ours = run_ours(args.tabcontam, work, d, test, port, args.api, args.seed)
                if args.no_rerun:
                    ours["rerun_seconds"] = None
                rows.append({"dataset": d, "test": test, "tabmemcheck": peer,
                             "tabcontam": ours, "note": NOTES[test]})
                write_results(out, settings, rows, tests)
                log(f"{d} / {test}: tabmemcheck {outcome} in {secs:.1f}s; "
                    f"tabcontam {ours['outcome']} in {seconds(ours['seconds'])}s")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()

    table, notes = write_results(out, settings, rows, tests)
    print(f"settings: {json.dumps(settings)}")
    print(table)
    print(notes)
    print(f"\nwritten: {out / 'vs_tabmemcheck.json'}, {out / 'vs_tabmemcheck.md'}")
    return 0


# tabcontam's max_tokens of each test (TestId::max_tokens in src/probe/mod.rs). tabmemcheck
# sends its config.max_tokens (1000) with header and feature-completion queries and no stop
# sequence, so without a cap its queries generate up to 1000 tokens each; its row and
# first-token queries ask for 1 + len(row) tokens themselves.
OUR_BUDGET = {"header": 200, "feature-completion-verbatim": 32}


def peer_budget(setting: str, test: str) -> int | None:
    """tabmemcheck.config.max_tokens for `test` under --peer-max-tokens."""
    if setting == "match":
        return OUR_BUDGET.get(test, 1000)
    if setting == "peer":
        return 1000
    try:
        return int(setting)
    except ValueError:
        raise SystemExit(
            f"vs_tabmemcheck: --peer-max-tokens: `{setting}` is not match, peer or a number"
        )


def peer_version() -> str:
    import tabmemcheck

    return tabmemcheck.__version__


if __name__ == "__main__":
    sys.exit(main())
