"""The in-process backend (transformers) in a child process (core/child.py): an lm-eval LM whose every request
is answered by the checkpoint loaded in the child, so that the sweep's own process never loads the model or
initialises CUDA, and the child's memory (on a GPU, the caching allocator's pool) is returned when the session
closes, before the next variant's engine starts."""

from __future__ import annotations

from pathlib import Path

from lm_eval.api.model import LM

from core.child import Child, report
from evals.kl import TOP_K


def _load(model_dir: str, batch_size: int, dtype: str, device: str):
    from evals.backends.inprocess import inprocess_lm

    lm = inprocess_lm(model_dir, batch_size=batch_size, dtype=dtype, device=device)
    lm.progress = report   # each request done, passed to the parent's progress
    return lm


class ChildLM(LM):
    """InprocessLM's interface, answered by a child process; `close()` (or leaving `with`) ends the child."""
    progress = None   # callable(n_done), as the other backends': advanced per request done

    def __init__(self, model_dir: str | Path, batch_size: int = 32, dtype: str = "bfloat16", device: str = "cpu"):
        super().__init__()
        self._child = Child(_load, str(model_dir), batch_size, dtype, device, on_report=self._advance)

    def _advance(self, n: int = 1) -> None:
        if self.progress is not None:
            self.progress(n)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return self._child.call("generate_until", requests, True)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self._child.call("loglikelihood", requests, True)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        return self._child.call("loglikelihood_rolling", requests, True)

    def topk_logprobs(self, pairs: list[tuple[str, str]], k: int = TOP_K) -> list[list[dict[str, float]]]:
        return self._child.call("topk_logprobs", pairs, k)

    @property
    def tokenizer_name(self) -> str:
        return self._child.call("__getattribute__", "tokenizer_name")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self._child.call("chat_template", chat_template)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self._child.call("apply_chat_template", chat_history, add_generation_prompt)

    @property
    def pid(self) -> int | None:
        return self._child.pid

    def close(self) -> None:
        self._child.close()

    def __enter__(self) -> "ChildLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
