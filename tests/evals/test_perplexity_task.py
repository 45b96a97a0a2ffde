"""python_docs_ppl: real-text perplexity on shipped prose, scored per document (bits per byte), in-process on
the demo model and checked against the model's own log-likelihood of each document."""

import json
import math

import torch

from evals.backends import inprocess_lm
from evals.task_facts import TASKS_DIR
from evals.runner import evaluate_task
from core.recipe import Task
from quantize.calibration_sources import SHIPPED
from reports.metric_kinds import higher_is_better, is_mean_metric
from tests.helpers import DEMO_MODEL
TASK_DIR = TASKS_DIR / "python_docs_ppl"


def _documents(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_corpus_is_shipped_and_calibration_sets_come_from_other_modules():
    test = _documents(TASK_DIR / "test.jsonl")
    assert len(test) == 60 and len({d["module"] for d in test}) == 60
    assert all(800 <= len(d["text"]) <= 4000 for d in test)
    for shipped in SHIPPED.values():
        calibration = _documents(shipped)
        assert not {d["module"] for d in test} & {d["module"] for d in calibration}
        assert not any(d["text"] in c["text"] for d in test for c in calibration)


def _loglikelihood(lm, text: str) -> float:
    """The document's log-likelihood straight from the model: every token, the first after the prefix token."""
    ids = [lm.prefix_token_id] + lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids[1:])[:, None]).sum().item()


def test_each_document_is_scored_in_bits_per_byte_as_a_pairable_mean(tmp_path):
    # short documents (the demo model's context is 512 tokens), so one forward pass scores each whole
    texts = [d["text"][:300] for d in _documents(TASK_DIR / "test.jsonl")[:4]]
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    lm = inprocess_lm(DEMO_MODEL)
    summary, samples = evaluate_task(lm, Task(name="python_docs_ppl", data_files=str(data)))

    entry = summary["doc_bits_per_byte"] | {"metric": "doc_bits_per_byte"}
    assert summary["primary"] == "doc_bits_per_byte" and entry["n"] == 4
    assert is_mean_metric(entry) and not higher_is_better(entry)   # the gate pairs it; lower is better
    for text, sample in zip(texts, samples):
        expected = -_loglikelihood(lm, text) / (len(text.encode()) * math.log(2))
        assert math.isclose(sample["metrics"]["doc_bits_per_byte,none"], expected, rel_tol=0.02)
    values = [s["metrics"]["doc_bits_per_byte,none"] for s in samples]
    assert entry["value"] == sum(values) / 4 and entry["ci95"][0] < entry["value"] < entry["ci95"][1]
