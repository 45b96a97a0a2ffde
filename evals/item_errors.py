"""One item's answer that breaks its scorer fails that item, never its task or its variant.

An exception while extracting, checking or running one answer (a program too deeply nested for the parser,
text that cannot be encoded, JSON nested past the recursion limit, a bug of the scorer's own) scores that
item 0 on every metric. Its reason (`TypeName: message`) is kept with the item's record as `scoring_error`
(evals/runner.py); it is logged at WARNING and its full traceback at DEBUG, by this module's logger, which a
sweep writes to the variant's `errors.log` (quant/logs.py's kept_in).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

_failed: dict[str, str] = {}   # lm-eval's doc_hash -> reason, for the items of the task being scored now


def doc_hash(doc: dict) -> str:
    """The item's `doc_hash` as lm-eval logs it beside the item's sample."""
    from lm_eval.utils import handle_non_serializable, hash_string

    return hash_string(json.dumps(doc, indent=2, default=handle_non_serializable, ensure_ascii=False))


def reason_of(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def fail_item(doc: dict, exc: Exception) -> str:
    reason = reason_of(exc)
    _failed[doc_hash(doc)] = reason
    log.warning("an item failed in scoring (scored 0): %s", reason)
    log.debug("the traceback of that item's scoring error", exc_info=exc)
    return reason


def guarded(process_results: Callable[[dict, list], dict], metrics: tuple[str, ...],
            not_the_items: tuple[type[Exception], ...] = ()) -> Callable[[dict, list], dict]:
    """lm-eval's process_results for a task whose metrics (all higher-is-better) are `metrics`: an item whose
    scoring raises scores 0 on each of them. `not_the_items`: exceptions that are no answer's fault (the
    sandbox missing) and end the task as they would unguarded."""
    def process(doc: dict, results: list) -> dict:
        try:
            return process_results(doc, results)
        except not_the_items:
            raise
        except Exception as exc:  # noqa: BLE001 - one answer must not end the task
            fail_item(doc, exc)
            return dict.fromkeys(metrics, 0.0)
    return process


def take() -> dict[str, str]:
    """The items that failed in scoring since the last call (doc_hash -> reason), forgotten here."""
    failed = dict(_failed)
    _failed.clear()
    return failed
