"""The long-context retrieval tasks (niah_<tokens>): items rebuilt from the shipped prose, the needle where the
item says, within the length, built deterministically from a seed, and scored by the number the model writes."""

import json
import sys
from pathlib import Path

import pytest

from evals import needle
from evals.registry import task_config
from evals.task_facts import task_dir
from tests.helpers import DEMO_MODEL, REPO

sys.path.insert(0, str(REPO / "scripts"))
from build_needle_tasks import build  # noqa: E402


def _smollm2_tokenizers() -> list[Path]:
    """SmolLM2's converted GGUF model where a SmolLM2 recipe ran (other GGUF models are cached beside it)."""
    sources = sorted(Path.home().glob(".cache/quant-suite/models/gguf/*/model/gguf_source.json"))
    return [s.with_name("tokenizer.json") for s in sources if "SmolLM2" in s.read_text()]


SMOLLM2 = _smollm2_tokenizers()


def _items(length: int) -> list[dict]:
    return [json.loads(line) for line in (task_dir(f"niah_{length}") / "test.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("length", needle.LENGTHS)
def test_shipped_items_plant_one_needle_at_their_depth_within_their_length(length):
    text = needle.haystack()
    items = _items(length)
    assert len(items) == 50 and {i["depth"] for i in items} == set(needle.DEPTHS)
    assert len({i["start"] for i in items}) == 50   # every item its own window of the prose
    for item in items:
        prompt = needle.prompt_of(item, text)
        assert prompt.count(str(item["value"])) == 1 and prompt.count(item["key"]) == 3
        assert 0.9 * (length - needle.ANSWER_TOKENS) <= item["tokens"] <= length - needle.ANSWER_TOKENS
        # the sentence start nearest the depth: a long sentence in a short window moves it most
        assert abs(item["needle_at"] / (item["end"] - item["start"]) - item["depth"]) <= max(0.06, 64 / length)
        assert prompt.endswith(f"The special magic number for {item['key']} mentioned in the provided text is")


def test_the_number_written_first_is_scored():
    doc = {"value": 4830271}
    assert needle.score(doc, " 4830271.") == 1.0
    assert needle.score(doc, " 4830271 or 1234567") == 1.0
    assert needle.score(doc, " 1234567, not 4830271") == 0.0
    assert needle.score(doc, " 483027") == 0.0 and needle.score(doc, " unknown") == 0.0


def test_the_tasks_generate_greedily_until_a_new_line():
    config = task_config("niah_2048")
    assert config["output_type"] == "generate_until" and config["metadata"]["context_tokens"] == 2048
    assert config["generation_kwargs"]["until"] == ["\n"]
    assert config["generation_kwargs"]["max_gen_toks"] == needle.ANSWER_TOKENS
    assert config["generation_kwargs"]["do_sample"] is False


def test_items_are_built_from_a_seed_within_the_length_in_the_tokenizers_tokens():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    text = needle.haystack()
    first = build(tokenizer, 256, 3, 0, text)
    assert first == build(tokenizer, 256, 3, 0, text) != build(tokenizer, 256, 3, 1, text)
    for item in first:
        tokens = len(tokenizer(needle.prompt_of(item, text), add_special_tokens=False)["input_ids"])
        assert tokens == item["tokens"] <= 256 - needle.ANSWER_TOKENS


@pytest.mark.skipif(not SMOLLM2, reason="SmolLM2's tokenizer is cached once a SmolLM2 recipe has run")
def test_the_shipped_items_are_what_the_builder_makes_with_smollm2s_tokenizer():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(SMOLLM2[0].parent)
    assert build(tokenizer, 512, 50, 0, needle.haystack()) == _items(512)
