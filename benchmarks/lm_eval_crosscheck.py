"""Cross-check of the suite's served generation against plain `lm_eval` on the same server: lm-eval's own
`local-completions` model, the same task YAML (evals/tasks), the same chat template applied by lm-eval
(`--apply_chat_template`), greedy. vLLM takes at most 4 stop strings, so lm_eval runs a copy of the task with
the first 4 and its answers are cut at the rest afterwards, as the suite cuts its own. Compares each item's
raw answer with the one a sweep recorded (variants/<v>/lm_eval/<v>/samples_<task>_*.jsonl) and reports the
share of identical answers.

Serve the variant's checkpoint first, with the flags the recipe gives the engine, e.g. for
recipes/qwen-coder.yaml's baseline (DIR: the variant's checkpoint, as results.json records it):
    VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind .venv-serve/bin/python \
        -m vllm.entrypoints.openai.api_server --model DIR --served-model-name bf16 --host 127.0.0.1 --port 8011 \
        --max-model-len 2048 --enforce-eager
then
    python benchmarks/lm_eval_crosscheck.py RUN --variant bf16 --tokenizer DIR --base-url http://127.0.0.1:8011
Exit 0 when at least --min-agreement of the items (default 0.95) have the same answer, 1 below, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from evals.backends.served import truncate_at_stops

REPO = Path(__file__).resolve().parent.parent


def samples(directory: Path, task: str) -> dict[str, str]:
    """doc_hash -> the raw answer, from the newest samples file of `task` under `directory`."""
    found = sorted(directory.rglob(f"samples_{task}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"crosscheck error: no samples_{task}_*.jsonl under {directory}")
    records = map(json.loads, found[-1].read_text().splitlines())
    return {r["doc_hash"]: r["resps"][0][0] for r in records}


def task_stops(task_dir: Path, task: str) -> list[str]:
    text = (task_dir / f"{task}.yaml").read_text()
    found = re.search(r"^\s*until:\s*(\[.*\])\s*(#.*)?$", text, re.MULTILINE)
    return json.loads(found.group(1)) if found else []


def capped_task(task: str, into: Path) -> Path:
    """A copy of the task whose stop list keeps vLLM's limit of 4 strings (the server refuses more); the rest
    are applied to lm_eval's answers afterwards, as the suite applies them to its own."""
    source = REPO / "evals" / "tasks" / task
    copy = shutil.copytree(source, into / task)
    stops = task_stops(source, task)
    text = (copy / f"{task}.yaml").read_text()
    (copy / f"{task}.yaml").write_text(text.replace(json.dumps(stops), json.dumps(stops[:4])))
    return into


def run_lm_eval(args, out: Path) -> None:
    model = httpx.get(f"{args.base_url}/v1/models", timeout=30).json()["data"][0]["id"]
    command = [sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args",
               f"model={model},base_url={args.base_url}/v1/completions,tokenizer={args.tokenizer},"
               "tokenizer_backend=huggingface,tokenized_requests=True,num_concurrent=2,max_retries=3",
               "--tasks", args.task, "--include_path", str(capped_task(args.task, out / "task")),
               "--apply_chat_template",
               "--limit", str(args.limit), "--log_samples", "--output_path", str(out), "--confirm_run_unsafe_code"]
    print("$ " + " ".join(command), flush=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--task", default="humaneval_instruct")
    ap.add_argument("--tokenizer", required=True, help="the served checkpoint's directory")
    ap.add_argument("--base-url", required=True, help="the server, http://127.0.0.1:PORT")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--min-agreement", type=float, default=0.95)
    ap.add_argument("--output", type=Path, help="keep lm_eval's output here; where it already holds this task's "
                    "samples, lm_eval is not run again (the run's samples may be written later)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = args.output or Path(scratch)
        if not list(out.rglob(f"samples_{args.task}_*.jsonl")):
            run_lm_eval(args, out)
        stops = task_stops(REPO / "evals" / "tasks" / args.task, args.task)
        theirs = {h: truncate_at_stops(answer, stops) for h, answer in samples(out, args.task).items()}
    ours = samples(args.run / "variants" / args.variant / "lm_eval", args.task)
    shared = [h for h in theirs if h in ours]
    if not shared:
        print("crosscheck error: no item in common (another --task or a run with these items?)", file=sys.stderr)
        return 2
    same = [h for h in shared if theirs[h] == ours[h]]
    share = len(same) / len(shared)
    print(f"{args.task}: {len(same)} of {len(shared)} greedy answers identical ({share:.1%}) between lm_eval "
          f"local-completions and the sweep's {args.variant}")
    for h in shared:
        if theirs[h] != ours[h]:
            print(f"  differs: doc_hash {h[:12]}… lm_eval {theirs[h][:60]!r} / sweep {ours[h][:60]!r}")
    return 0 if share >= args.min_agreement else 1


if __name__ == "__main__":
    sys.exit(main())
