"""Sampled evaluation: K seeded samples per item, each scored, the item's score their success rate; pass@k,
maj@K and the no-answer rate; reasoning traces (think tags, or the server's `reasoning` field) never scored, a
trace cut by the budget no answer. Against a stand-in reasoning server on 127.0.0.1 (tests/hostile_server.py)."""

import itertools
import json

import pytest

from core.recipe import RecipeError, Task, parse_recipe
from core.results import Accuracy
from evals.backends import ServedLM
from evals.reasoning import split_server, split_tags
from evals.runner import evaluate_task
from evals.sampling import ks_for, majority_score, merge_records, pass_at_k, seed_for
from tests.helpers import REPO
from tests.hostile_server import Server

DEMO_MATH = REPO / "evals/tasks/demo_math/test.jsonl"
SAMPLED = {"do_sample": True, "temperature": 0.8, "top_p": 0.95}


def test_pass_at_k_is_the_chance_that_some_of_k_drawn_samples_is_right():
    for n, c, k in [(4, 1, 1), (4, 2, 2), (8, 3, 4), (5, 0, 3), (5, 5, 1), (6, 4, 3)]:
        draws = list(itertools.combinations([True] * c + [False] * (n - c), k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))
    assert ks_for(1) == [1] and ks_for(5) == [1, 2, 4, 5] and ks_for(16) == [1, 2, 4, 8, 16]


def test_majority_compares_answers_by_value_and_leaves_no_answer_out():
    assert majority_score(["42", "41", "42.0", "[invalid]", "[invalid]"], [1, 0, 1, 0, 0],
                          [False, False, False, True, True]) == 1
    assert majority_score(["41", "42"], [0, 1], [False, False]) == 0     # a tie: the first to the top count
    assert majority_score(["def f():\n  return 1", "x"], [1, 0], [False, False]) is None   # programs


def test_an_empty_or_unextracted_answer_is_no_answer_also_as_lm_evals_list_of_one():
    records = [[{"doc_id": 0, "resps": [[a]], "filtered_resps": {"strict": [a]}, "metrics": {"em,strict": s}}]
               for a, s in (("42", 1.0), ("[invalid]", 0.0), ("", 0.0), ("42.0", 1.0))]
    [merged] = merge_records(records, ["strict"], "em,strict")
    assert merged["no_answer"] == [False, True, True, False] and merged["majority"] == 1.0
    assert merged["metrics"] == {"em,strict": 0.5} and merged["resps"] == [["42", "[invalid]", "", "42.0"]]


def test_seeds_differ_per_item_and_repeat_and_are_the_same_on_every_run():
    seeds = {seed_for(d, r) for d in range(50) for r in range(16)}
    assert len(seeds) == 800 and seed_for(3, 2) == seed_for(3, 2)


def test_a_trace_is_never_the_answer_and_an_unclosed_one_is_no_answer():
    tags = ("<think>", "</think>")
    assert (split_tags("<think>so #### 4</think> #### 5", tags).answer, split_tags("x #### 5", tags).answer) \
        == (" #### 5", "x #### 5")
    cut = split_tags("<think>so #### 4 and", tags)
    assert (cut.answer, cut.cut, cut.reasoning) == ("", True, "so #### 4 and")
    assert split_tags("so #### 4", tags, prompt="Q: 2+2?\n<think>\n").cut   # the template opened the trace
    assert split_server("", "so #### 4", "length").cut and not split_server(" #### 4", "so", "stop").cut


def test_repeats_need_sampling_and_reasoning_tags_must_be_given():
    with pytest.raises(ValueError, match="do_sample: true"):
        Task(name="demo_math", repeats=4)
    with pytest.raises(ValueError, match="temperature"):
        Task(name="demo_math", repeats=4, gen_kwargs={"do_sample": True, "temperature": -1})
    with pytest.raises(ValueError, match="non-empty"):
        Task(name="demo_math", reasoning={"tags": ["<think>", ""]})
    assert Task(name="demo_math").lm_eval_options() == {} and Task(name="demo_math").sampling_key() == {}


def _served(mode: str) -> tuple[Server, ServedLM]:
    server = Server(mode)
    for line in DEMO_MATH.read_text().splitlines()[:8]:
        doc = json.loads(line)
        server.httpd.answers[doc["question"]] = doc["answer"].rsplit("#### ", 1)[1]
    return server, ServedLM(f"{server.url}/v1/completions", "served")


@pytest.mark.parametrize("mode", ["reasoning-tags", "reasoning-field"])
def test_sampled_reasoning_run_scores_each_sample_without_its_trace(mode):
    server, lm = _served(mode)
    try:
        task = Task(name="demo_math", data_files=str(DEMO_MATH), limit=8, repeats=4, gen_kwargs=SAMPLED,
                    reasoning={"source": "tags" if mode == "reasoning-tags" else "server"})
        summary, samples = evaluate_task(lm, task)
    finally:
        server.stop()
    seeds = [b["seed"] for b in server.httpd.bodies]
    assert sorted(seeds) == sorted(seed_for(d, r) for d in range(8) for r in range(4))
    assert all(b["stop"] == [] and b["temperature"] == 0.8 and b["top_p"] == 0.95 for b in server.httpd.bodies)
    for record in samples:
        d = record["doc_id"]
        assert len(record["resps"][0]) == 4 and len(record["reasoning"]) == 4
        if d % 4 == 3:   # the trace never closed, though it holds the right answer: no answer, a failure
            assert record["metrics"]["exact_match,none"] == 0 and all(record["no_answer"])
            assert record["reasoning_cut"] == [True] * 4 and record["resps"][0] == [""] * 4
        else:            # right where the seed is even: the item's success rate
            expected = sum(seed_for(d, r) % 2 == 0 for r in range(4)) / 4
            assert record["metrics"]["exact_match,none"] == expected
            assert record["scores"]["exact_match,none"] == [float(seed_for(d, r) % 2 == 0) for r in range(4)]
    rates = [r["metrics"]["exact_match,none"] for r in samples]
    sampling = summary["sampling"]
    assert summary["exact_match"]["value"] == pytest.approx(sum(rates) / 8) == sampling["avg"]["value"]
    assert sampling["no_answer"]["value"] == pytest.approx(2 / 8)
    c = [sum(r["scores"]["exact_match,none"]) for r in samples]
    assert sampling["pass_at"]["4"] == pytest.approx(sum(x > 0 for x in c) / 8)
    assert sampling["pass_at"]["1"] == pytest.approx(sampling["avg"]["value"])
    assert "majority" not in sampling   # demo_math scores the raw text: no extracted answer to vote on
    Accuracy.model_validate({"metric": "exact_match", **summary["exact_match"], "sampling": sampling})


def test_a_greedy_task_sends_the_fixed_seed_and_its_stops_as_before():
    server, lm = _served("reasoning-tags")
    try:
        lm.generate_until([type("R", (), {"args": ("Q: " + next(iter(server.httpd.answers)), {"until": ["\n\n"]}),
                                           "doc_id": 0})()])
    finally:
        server.stop()
    [body] = server.httpd.bodies
    assert body["seed"] == 1234 and body["stop"] == ["\n\n"] and "top_p" not in body and body["temperature"] == 0


def test_a_recipe_with_repeats_on_a_greedy_task_is_one_clear_error(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nmodel: m\nvariants: [{name: a, baseline: true}]\n"
                      "tasks: [{name: demo_math, repeats: 8}]\n")
    with pytest.raises(RecipeError) as err:
        parse_recipe(recipe.read_text(), str(recipe))
    assert len(err.value.problems) == 1 and "do_sample: true" in err.value.problems[0]


def test_a_backend_that_cannot_seed_or_split_traces_leaves_the_task_not_measurable():
    from evals.backends.served import NotMeasurable
    from evals.sampled_runner import evaluate_sampled

    task = Task(name="demo_math", repeats=2, gen_kwargs=SAMPLED)
    with pytest.raises(NotMeasurable, match="need the served backend"):
        evaluate_sampled(object(), task, run=None, summarise=None)


def test_reasoning_and_answer_tokens_are_counted_per_sample_and_item():
    from transformers import AutoTokenizer

    from evals.response_length import reasoning_tokens
    from tests.helpers import DEMO_MODEL

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    count = lambda text: len(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    samples = [{"resps": [[" #### 4", ""]], "reasoning": ["two and two", "so far we have"], "metrics": {}},
               {"resps": [[" #### 5", " #### 5"]], "reasoning": ["", "five"], "metrics": {}}]
    summary = reasoning_tokens(samples, DEMO_MODEL)
    assert samples[0]["reasoning_tokens"] == [count("two and two"), count("so far we have")]
    assert samples[0]["answer_tokens"] == [count(" #### 4"), 0] and samples[1]["reasoning_tokens"][0] == 0
    first = (count("two and two") + count("so far we have")) / 2
    assert samples[0]["metrics"]["reasoning_tokens"] == first
    assert summary["value"] == pytest.approx((first + count("five") / 2) / 2) and summary["n"] == 2
    assert reasoning_tokens([{"resps": [["x"]], "metrics": {}}], DEMO_MODEL) is None


def test_a_sampled_tasks_prompts_are_fitted_as_one_answers():
    from evals.prompt_fit import longest_request
    from tests.helpers import DEMO_MODEL

    sampled = Task(name="demo_math", limit=5, repeats=4, gen_kwargs={**SAMPLED, "max_gen_toks": 64},
                   reasoning={"tags": ["<think>", "</think>"]})
    greedy = Task(name="demo_math", limit=5, gen_kwargs={"max_gen_toks": 64})
    assert longest_request(sampled, DEMO_MODEL) == longest_request(greedy, DEMO_MODEL) is not None
