"""Each demo scorer on known-right and known-wrong answers, and the test sets themselves."""

import importlib.util
import json

import pytest

from demo.tasks.build import GENERATORS, eval_items, train_items
from evals.registry import TASKS_DIR
from tests.evals.sandbox_modes import MODES, running_in


def utils_of(task):
    spec = importlib.util.spec_from_file_location(f"{task}_utils", TASKS_DIR / task / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def docs(task, n=None):
    lines = (TASKS_DIR / task / "test.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[:n]]


@pytest.mark.parametrize("task", list(GENERATORS))
def test_committed_test_sets_match_the_generator(task):
    assert docs(task) == eval_items(task)
    assert len(docs(task)) >= 200


@pytest.mark.parametrize("task", list(GENERATORS))
def test_training_items_never_contain_test_prompts(task):
    prompt_of = GENERATORS[task].prompt_of
    test_prompts = {prompt_of(d) for d in docs(task)}
    assert not test_prompts & {prompt_of(d) for d in train_items(task, 2000, seed=1234)}


@pytest.mark.parametrize("mode", MODES)
def test_code_scorer_right_and_wrong(mode, monkeypatch):
    with running_in(mode, monkeypatch):
        _check_code_scorer_right_and_wrong()


def _check_code_scorer_right_and_wrong():
    utils = utils_of("demo_code")
    for doc in docs("demo_code", 20):
        assert utils.process_results(doc, [doc["canonical_solution"]]) == {"pass@1": 1.0}
    doc = docs("demo_code", 1)[0]
    assert utils.process_results(doc, ["    return None\n"]) == {"pass@1": 0.0}
    assert utils.process_results(doc, ["    return (\n"]) == {"pass@1": 0.0}  # syntax error
    assert utils.process_results(doc, ["    while True:\n        pass\n"]) == {"pass@1": 0.0}  # timeout


def test_code_scorer_counts_only_programs_whose_tests_ran_to_the_end():
    utils = utils_of("demo_code")
    doc = docs("demo_code", 1)[0]
    for early_exit in ("    import sys\n    sys.exit(0)\n", "    return None\nimport os\nos._exit(0)\n",
                       "    return None\nraise SystemExit\n", "    return None\nprint('passed')\nexit()\n"):
        assert utils.process_results(doc, [early_exit]) == {"pass@1": 0.0}, early_exit


def test_math_scorer_right_and_wrong():
    utils = utils_of("demo_math")
    doc = docs("demo_math", 1)[0]
    gold = doc["answer"].split("#### ")[-1]
    assert utils.process_results(doc, [" " + doc["answer"]]) == {"exact_match": 1.0}
    assert utils.process_results(doc, [f" 1 + 1 = 2\n#### {int(gold) + 1}"]) == {"exact_match": 0.0}
    assert utils.process_results(doc, [f" the answer is {gold}"]) == {"exact_match": 0.0}  # no "####"


def test_extraction_scorer_right_partial_and_invalid():
    utils = utils_of("demo_extraction")
    doc = docs("demo_extraction", 1)[0]
    gold = json.loads(doc["gold"])
    assert utils.process_results(doc, [" " + doc["gold"]]) == {"field_f1": 1.0, "json_valid": 1.0, "exact_match": 1.0}
    half = dict(gold, customer="Nobody Here", city="Atlantis")
    scores = utils.process_results(doc, [json.dumps(half)])
    assert scores["field_f1"] == pytest.approx(0.5) and scores["exact_match"] == 0.0
    assert utils.process_results(doc, ['{"customer": "x"'])["json_valid"] == 0.0
    assert utils.process_results(doc, ["[1, 2]"])["field_f1"] == 0.0


def test_served_backend_applies_stops_beyond_the_servers_cap():
    from evals.backends.served import MAX_SERVER_STOPS, truncate_at_stops
    stops = ["\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#"]
    assert len(stops) > MAX_SERVER_STOPS
    assert truncate_at_stops("    return x\n# done", stops) == "    return x"
    assert truncate_at_stops("    return x\n", stops) == "    return x\n"


def test_wilson_interval_contains_the_estimate_at_the_edges():
    from evals.stats import mean_ci, wilson
    assert wilson(0, 12)[0] == 0.0 and wilson(12, 12)[1] == 1.0
    for k in range(13):
        low, high = wilson(k, 12)
        assert low <= k / 12 <= high
    assert mean_ci([0.5, 1.0, 0.0, 0.25])["ci_method"] == "bootstrap"
