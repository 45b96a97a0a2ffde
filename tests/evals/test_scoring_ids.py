"""What a scorer sends to the engine for a text is what lm-eval's `hf` backend scores for it (evals/tokens.py),
and a change to that is part of every eval's cache key."""

import sys

import pytest
from lm_eval.utils import get_rolling_token_windows

from evals.backends import inprocess_lm
from evals.tokens import encoder, prefix_token_id, rolling_ids, split_ids
from tests.helpers import DEMO_MODEL

PAIRS = [("def f(x):\n    \"\"\"Twice x.\"\"\"\n", "    return 2 * x\n"),   # trailing newline: moves to the answer
         ("Question: 2 + 2 =", " 4"), ("JSON:  ", "{\"a\": 1}"), ("", "hello there")]


@pytest.fixture(scope="module")
def hf():
    return inprocess_lm(DEMO_MODEL)


def test_pairs_split_as_lm_eval_hf_splits_them(hf):
    encode, prefix = encoder(hf.tokenizer), prefix_token_id(hf.tokenizer)
    assert prefix == hf.prefix_token_id
    for context, continuation in PAIRS:
        if context:
            expected = hf._encode_pair(context, continuation)
        else:   # lm-eval's empty context: the prefix token, then the continuation without special tokens
            expected = ([hf.prefix_token_id], hf.tok_encode(continuation, add_special_tokens=False))
        assert split_ids(encode, context, continuation, prefix) == tuple(map(list, expected)), (context, continuation)


def test_rolling_scores_every_token_after_the_prefix_as_lm_eval_hf(hf):
    text = "The quick brown fox jumps over the lazy dog."
    ids = rolling_ids(encoder(hf.tokenizer), prefix_token_id(hf.tokenizer), text)
    [(context, scored)] = get_rolling_token_windows(token_list=hf.tok_encode(text), prefix_token=hf.prefix_token_id,
                                                    max_seq_len=hf.max_length, context_len=1)
    assert ids[:1] == context[:1] and ids[1:] == scored   # the text's first token is scored too


def test_the_scoring_version_is_part_of_the_eval_cache_key(tmp_path, monkeypatch):
    import quant.eval_stage
    from core.recipe import parse_recipe
    from core.store import Cache
    from quant.context import SweepContext
    from quant.progress import Reporter
    recipe = parse_recipe("name: r\nmodel: demo\ntasks: [{name: math_mc, limit: 3}]\n"
                          "variants:\n  - {name: bf16, baseline: true}\n")
    ctx = SweepContext(recipe=recipe, out=tmp_path / "run", cache=Cache(tmp_path / "cache"), model_dir=DEMO_MODEL,
                       model_key="demo", engine_python=sys.executable, engine_version=None,
                       reporter=Reporter(quiet=True))
    task = recipe.tasks[0]
    keys = {backend: quant.eval_stage.eval_key(ctx, task, "ckpt", backend) for backend in ("served", "inprocess")}
    monkeypatch.setattr(quant.eval_stage, "SCORING_VERSION", quant.eval_stage.SCORING_VERSION + 1)
    for backend, key in keys.items():
        assert quant.eval_stage.eval_key(ctx, task, "ckpt", backend) != key
    monkeypatch.undo()
    assert quant.eval_stage.eval_key(ctx, task, "ckpt", "served") == keys["served"]
