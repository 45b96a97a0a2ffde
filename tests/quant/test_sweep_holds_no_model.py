"""The sweep's own process never loads a model: sensitivity ranking and the in-process fallback run in child
processes (core/child.py), so nothing the model held (on a GPU, the caching allocator's pool) stays behind to
fail the next engine's free-memory check. Shown in a fresh interpreter: after a ranking, an in-process eval and
KL's top-k on the demo model, no model was loaded there and torch.cuda was never initialised there (both are
made to fail in that process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import DEMO_MODEL, REPO

SCRIPT = textwrap.dedent(f"""
    import sys
    from pathlib import Path
    import torch, transformers
    def refuse(*args, **kwargs):
        raise AssertionError("the sweep's process loaded a model or initialised CUDA")
    torch.cuda._lazy_init = torch.cuda.init = refuse
    transformers.AutoModelForCausalLM.from_pretrained = refuse
    from core.recipe import Task, parse_recipe
    from core.store import Cache
    from evals.backends.inprocess_child import ChildLM
    from evals.runner import evaluate_task
    from quant.progress import Reporter
    from quant.sensitivity_stage import ranking

    model = Path({str(DEMO_MODEL)!r})
    recipe = parse_recipe("name: r\\nmodel: demo\\ntasks: [demo_math]\\nvariants:\\n  - {{name: b, baseline: true}}\\n"
                          "  - {{name: w2, weights: {{num_bits: 2, strategy: channel, group_size: null}}, "
                          "sensitivity: {{keep_top: 1, by: layer, samples: 2, items_per_task: 0}}}}\\n")
    reporter = Reporter(quiet=True)
    result = ranking(Cache(Path(sys.argv[1])), reporter, model, "demo", recipe, recipe.variants[1])
    assert result["units"], result
    with ChildLM(model, dtype="float32") as lm:
        done = []
        lm.progress = done.append
        summary, _ = evaluate_task(lm, Task(name="demo_math", limit=2))
        topk = lm.topk_logprobs([("1 + 1 =", " 2")], 3)
        pid = lm.pid
    assert summary["exact_match"]["n"] == 2 and sum(done) == 2, (summary, done)
    assert len(topk[0]) >= 1 and len(topk[0][0]) == 3
    print("cuda initialised in the sweep's process:", torch.cuda.is_initialized())
    import psutil
    print("child gone:", not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
""")


@pytest.mark.slow   # a ranking and an eval on the demo model, each in a fresh interpreter
def test_ranking_and_in_process_scoring_leave_the_sweeps_process_without_a_model(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "cache")], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cuda initialised in the sweep's process: False" in out.stdout, out.stdout
    assert "child gone: True" in out.stdout


def test_a_child_that_fails_or_dies_comes_back_as_one_line():
    from core.child import ChildError, call_in_child

    with pytest.raises(ChildError, match=r"^ValueError: invalid literal for int\(\) with base 10: 'x'$"):
        call_in_child(int, "x")
    with pytest.raises(ChildError, match=r"^the child process died \(exit code 3\)$"):
        call_in_child(os._exit, 3)
    assert call_in_child(int, "7") == 7
