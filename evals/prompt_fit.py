"""How many tokens a task's largest request needs in the engine's context, worked out before any work for a task
whose data is here (ours in evals/tasks, or a task given `data_files:`).

The requests are those the eval will send: lm-eval builds them exactly as evals/runner.py has it build them
for the sweep (few-shot, limit, chat template, system instruction, gen_kwargs), on an LM that is the served
one (evals/backends/served.py: its chat template, its tokenizer) but stops lm-eval at its first request. Each
is counted as the served LM counts it (evals/tokens.py): a generation's prompt plus its max_gen_toks; a
log-likelihood's context and continuation together; a rolling log-likelihood's whole text.

The answer is remembered by content (core/memo.py): the task's definition and data, the tokenizer's files,
the libraries' versions and this code; any change is a new key."""

from __future__ import annotations

import os
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from core.hashing import digest, file_digest, versions
from core.memo import remembered, source_digest
from evals.task_facts import SHIPPED_DATA, TASKS_DIR

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".pdparams", ".h5", ".msgpack",
                   ".ot", ".npz")


def longest_request(task, tokenizer_dir: Path) -> dict[str, Any] | None:
    """{"tokens": prompt (or context) tokens, "budget": tokens generated after it (0 for scoring), "kind":
    lm-eval's request type} of the task's request needing the most context; None where that cannot be known
    before work (the tokenizer is not here, the task's prompts cannot be built here)."""
    if not _has_tokenizer(tokenizer_dir):
        return None
    key = (task.model_dump(mode="json"), _task_files_digest(task), _tokenizer_digest(tokenizer_dir),
           versions("lm_eval", "transformers", "tokenizers", "jinja2", "datasets"), _code_digest())
    return remembered("longest-request", key, lambda: _measure(task, tokenizer_dir))


class _Built(Exception):
    def __init__(self, kind: str, requests: list) -> None:
        super().__init__(kind)
        self.kind, self.requests = kind, requests


def _recording_lm(tokenizer_dir: Path):
    from evals.backends.served import ServedLM

    class RecordingLM(ServedLM):
        """The served LM, stopped at the first requests lm-eval hands it."""

        def generate_until(self, requests, disable_tqdm: bool = False):
            raise _Built("generate_until", requests)

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            raise _Built("loglikelihood", requests)

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise _Built("loglikelihood_rolling", requests)

        @property
        def encode(self):
            return self._encode

        @property
        def prefix_id(self) -> int:
            return self._prefix_id

    return RecordingLM("http://127.0.0.1/v1/completions", "prompt-fit", tokenizer_dir=tokenizer_dir)


def _measure(task, tokenizer_dir: Path) -> dict[str, Any] | None:
    with _quietly():
        try:
            kind, requests, lm = _requests(task, tokenizer_dir)
            sizes = [_size(kind, request.args, lm) for request in requests]
        except Exception:   # a task or tokenizer that fails here fails at eval time, with its own message
            return None
    if not sizes:
        return None
    tokens, budget = max(sizes, key=sum)
    return {"tokens": tokens, "budget": budget, "kind": kind}


def _requests(task, tokenizer_dir: Path) -> tuple[str, list, Any]:
    """(request type, lm-eval's requests, the LM they were built on)."""
    from evals.runner import evaluate_task

    lm = _recording_lm(tokenizer_dir)
    try:
        evaluate_task(lm, task.model_copy(update={"repeats": 1, "reasoning": None}))   # one answer's requests
    except _Built as built:
        return built.kind, built.requests, lm
    return "generate_until", [], lm   # lm-eval asked for nothing


def _size(kind: str, args: tuple, lm) -> tuple[int, int]:
    """(tokens of the request's text, tokens generated after it), counted as the served LM counts them."""
    from evals.backends.served import generation_budget
    from evals.tokens import rolling_ids, split_ids

    encode, prefix = lm.encode, lm.prefix_id
    if kind == "generate_until":
        context, gen_kwargs = args
        return len(encode(context)), generation_budget(gen_kwargs)
    if kind == "loglikelihood":
        context, continuation = split_ids(encode, *args, prefix)
        return len(context) + len(continuation), 0
    return len(rolling_ids(encode, prefix, args[0])), 0


@contextmanager
def _quietly():
    """Without the eval's own output (its settings, progress bars, the tokenizer's length warnings): this is
    not the eval."""
    import logging

    loggers = [logging.getLogger(name) for name in ("lm_eval", "transformers", "datasets")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with open(os.devnull, "w") as sink, redirect_stderr(sink), redirect_stdout(sink):
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _has_tokenizer(directory: Path) -> bool:
    return any((Path(directory) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json",
                                                                "tokenizer.model"))


def _tokenizer_digest(directory: Path) -> str:
    """Every file of the model's directory but its weights (tokenizer, its config, the chat template)."""
    files = sorted(p for p in Path(directory).iterdir() if p.is_file() and p.suffix not in WEIGHT_SUFFIXES)
    return digest([(p.name, file_digest(p)) for p in files])


def _task_files_digest(task) -> str:
    """Every task definition of ours (a task may include another's) with the data shipped beside it, and the
    task's own data files."""
    ours = sorted(p for p in TASKS_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and (p.suffix in (".yaml", ".py") or p.name == SHIPPED_DATA))
    given = [task.data_files] if isinstance(task.data_files, str) else sorted((task.data_files or {}).values())
    return digest([(str(p.relative_to(TASKS_DIR)), file_digest(p)) for p in ours],
                  [(f, file_digest(Path(f))) for f in given])


def _code_digest() -> str:
    here = Path(__file__).parent   # read, not imported: importing the served LM imports lm-eval
    return source_digest(__file__, *(here / name for name in ("registry.py", "runner.py", "task_facts.py",
                                                              "tokens.py", "backends/served.py")))
