"""Calibration sets as llm-compressor users give them: the demo generators, the shipped stdlib sets, JSONL, Parquet
and CSV files, directories written by `datasets`, a dataset repo read the way a hub id is read; split, column,
chat messages through the model's chat template, shuffle seed; the set's hash; one clear error per problem."""

import csv
import json
from pathlib import Path

import pytest

from core.hashing import digest
from core.recipe import Calibration
from quantize.calibration import calibration_key, calibration_texts, source_problems, texts_sha256
from quantize.calibration_sources import CalibrationError
from tests.helpers import DEMO_MODEL

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}")
CHATS = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
         for i in range(6)]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _texts(n: int) -> list[dict]:
    return [{"id": i, "text": f"t{i}"} for i in range(n)]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    """The demo model's tokenizer with a chat template (the demo model has none)."""
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("chat")
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(out)
    return out


# --- the demo generators ------------------------------------------------------------------------------

def test_demo_texts_deterministic_and_mixed():
    from demo.tasks import GENERATORS
    from demo.tasks.build import eval_items

    a = calibration_texts(Calibration(num_samples=30, seed=3))
    assert a == calibration_texts(Calibration(num_samples=30, seed=3))
    assert texts_sha256(a) == texts_sha256(list(a))
    assert a != calibration_texts(Calibration(num_samples=30, seed=4))
    assert len(a) == 30
    assert any(t.startswith("Question:") for t in a) and any(t.startswith("def ") for t in a)
    assert any(t.startswith("Extract ") for t in a)
    test_prompts = {GENERATORS[t].prompt_of(d) for t in GENERATORS for d in eval_items(t)}
    assert not any(t.startswith(p) for t in a for p in test_prompts)


def test_demo_cache_key_is_the_one_made_before_the_new_fields():
    """Stages cached by earlier versions stay valid: the demo section's key is its four original fields."""
    calibration = Calibration(num_samples=16, max_seq_length=128)
    assert calibration_key(calibration) == {"source": "demo", "num_samples": 16, "max_seq_length": 128, "seed": 0}


# --- files ----------------------------------------------------------------------------------------------

def test_jsonl_shuffled_with_the_seed_and_stable(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", _texts(50))
    calibration = Calibration(source=str(path), num_samples=10, seed=1)
    texts = calibration_texts(calibration)
    assert len(texts) == 10 == len(set(texts)) and set(texts) <= {f"t{i}" for i in range(50)}
    assert texts != [f"t{i}" for i in range(10)]                       # shuffled, as llm-compressor does
    assert texts_sha256(calibration_texts(calibration)) == texts_sha256(texts)
    assert calibration_texts(calibration.model_copy(update={"seed": 2})) != texts
    in_order = calibration.model_copy(update={"shuffle": False})
    assert calibration_texts(in_order) == [f"t{i}" for i in range(10)]
    # a fixed seed picks the same rows on every machine and Python version this suite supports
    assert texts_sha256(texts) == texts_sha256(["t8", "t36", "t4", "t16", "t7", "t31", "t28", "t30", "t41", "t24"])


def test_jsonl_other_column(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", [{"code": f"def f{i}(): pass", "text": "x"} for i in range(3)])
    texts = calibration_texts(Calibration(source=str(path), column="code", num_samples=3, shuffle=False))
    assert texts == ["def f0(): pass", "def f1(): pass", "def f2(): pass"]


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": [f"p{i}" for i in range(8)], "n": list(range(8))}), path)
    calibration = Calibration(source=str(path), column="body", num_samples=8, shuffle=False)
    assert calibration_texts(calibration) == [f"p{i}" for i in range(8)]
    assert calibration_texts(calibration.model_copy(update={"split": "train"})) == [f"p{i}" for i in range(8)]


def test_csv_with_messages_as_json(tmp_path, chat_model):
    from transformers import AutoTokenizer

    path = tmp_path / "c.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, ["conversation"])
        writer.writeheader()
        writer.writerows({"conversation": json.dumps(chat)} for chat in CHATS)
    calibration = Calibration(source=str(path), messages="conversation", num_samples=6, shuffle=False)
    texts = calibration_texts(calibration, chat_model)
    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    assert texts == [tokenizer.apply_chat_template(chat, tokenize=False) for chat in CHATS]
    assert texts[0] == "<|user|>question 0\n<|assistant|>answer 0\n"


def test_messages_rendered_with_the_chat_template(tmp_path, chat_model):
    path = _jsonl(tmp_path / "chats.jsonl", [{"messages": chat} for chat in CHATS])
    calibration = Calibration(source=str(path), messages="messages", num_samples=4, seed=5)
    texts = calibration_texts(calibration, chat_model)
    assert all(t.startswith("<|user|>question ") and "<|assistant|>answer " in t for t in texts)
    assert texts == calibration_texts(calibration, chat_model)


def test_a_template_that_writes_bos_gives_one_bos_once_tokenized(tmp_path, chat_model):
    """The demo tokenizer adds <s> itself; a template writing it too would calibrate on two."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    tokenizer.chat_template = "{{ bos_token }}" + TEMPLATE
    tokenizer.save_pretrained(tmp_path / "bos")
    path = _jsonl(tmp_path / "chats.jsonl", [{"messages": chat} for chat in CHATS])
    (text,) = calibration_texts(Calibration(source=str(path), messages="messages", num_samples=1, shuffle=False),
                                tmp_path / "bos")
    assert text == "<|user|>question 0\n<|assistant|>answer 0\n"
    assert tokenizer(text).input_ids.count(tokenizer.bos_token_id) == 1


# --- directories written by datasets, and a dataset repo (read as a hub id is) ---------------------------

def test_save_to_disk_dataset_dict_and_single(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict(train=Dataset.from_dict({"text": ["a", "b", "c"]}),
                test=Dataset.from_dict({"text": ["x", "y"]})).save_to_disk(tmp_path / "dict")
    both = Calibration(source=str(tmp_path / "dict"), num_samples=2, shuffle=False)
    assert calibration_texts(both) == ["a", "b"]                               # "train" when not named
    assert calibration_texts(both.model_copy(update={"split": "test"})) == ["x", "y"]
    Dataset.from_dict({"text": ["s0", "s1"]}).save_to_disk(tmp_path / "single")
    assert calibration_texts(Calibration(source=str(tmp_path / "single"), num_samples=2, shuffle=False)) == ["s0", "s1"]


def test_dataset_repo_directory(tmp_path):
    """A directory laid out as a dataset repo goes through `datasets`' own loader, the call a hub id takes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "repo/data").mkdir(parents=True)
    pq.write_table(pa.table({"text": [f"r{i}" for i in range(5)]}), tmp_path / "repo/data/train-00000-of-00001.parquet")
    pq.write_table(pa.table({"text": ["v0"]}), tmp_path / "repo/data/validation-00000-of-00001.parquet")
    calibration = Calibration(source=str(tmp_path / "repo"), num_samples=5, shuffle=False)
    assert calibration_texts(calibration) == [f"r{i}" for i in range(5)]
    assert calibration_texts(calibration.model_copy(update={"split": "validation", "num_samples": 1})) == ["v0"]
    assert source_problems(calibration.model_copy(update={"split": "test"})) == [
        f"split 'test' is not in dataset {str(tmp_path / 'repo')!r} (splits: train, validation)"]


def test_a_hub_id_offline_and_not_cached_is_one_error(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (problem,) = source_problems(Calibration(source="nobody-here/no-such-dataset", num_samples=2))
    assert problem.startswith("calibration source 'nobody-here/no-such-dataset' is not a local file or directory, "
                              "and loading it as a hub dataset failed: ")
    assert "\n" not in problem


# --- the shipped real-text sets ----------------------------------------------------------------------------

def test_shipped_code_and_prose():
    code = calibration_texts(Calibration(source="stdlib-code", num_samples=256))
    assert len(set(code)) == 256 and sum("def " in t for t in code) > 200
    assert all(1000 <= len(t) <= 3600 for t in code)
    prose = calibration_texts(Calibration(source="stdlib-prose", num_samples=128))
    assert len(prose) == 128 and all(len(t) >= 300 for t in prose) and sum(". " in t for t in prose) > 100
    assert source_problems(Calibration(source="stdlib-prose", num_samples=129)) == [
        "stdlib-prose has 128 rows, fewer than num_samples 129"]


def test_key_follows_the_data_of_a_local_source(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", _texts(4))
    calibration = Calibration(source=str(path), num_samples=2)
    before = digest(calibration_key(calibration))
    _jsonl(path, _texts(5))
    assert digest(calibration_key(calibration)) != before
    assert "shuffle" in calibration_key(calibration.model_copy(update={"shuffle": False}))


# --- one clear error per problem, before any work ----------------------------------------------------------

@pytest.mark.parametrize("fields, expected", [
    ({"source": "{d}/missing.jsonl"}, "calibration source '{d}/missing.jsonl': no such file or directory"),
    ({"source": "{d}/c.jsonl", "column": "body"}, "column 'body' is not in {d}/c.jsonl (columns: id, text)"),
    ({"source": "{d}/c.jsonl", "split": "test"}, "split 'test' is not in {d}/c.jsonl (splits: train)"),
    ({"source": "{d}/c.jsonl", "num_samples": 20}, "{d}/c.jsonl has 12 rows, fewer than num_samples 20"),
    ({"source": "{d}/c.jsonl", "column": "id"}, "{d}/c.jsonl row 1: column 'id' is not text (int)"),
    ({"source": "{d}/c.jsonl", "messages": "text"},
     "{d}/c.jsonl row 1: column 'text' must be a list of chat messages ({{role, content}})"),
    ({"source": "{d}/bad.jsonl"}, "{d}/bad.jsonl:2: not valid JSON: Expecting value"),
    ({"source": "{d}/notes.txt"}, "calibration source '{d}/notes.txt': a data file ends in .jsonl, .parquet, .csv"),
])
def test_validation_errors(tmp_path, fields, expected):
    _jsonl(tmp_path / "c.jsonl", _texts(12))
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\nnot json\n')
    (tmp_path / "notes.txt").write_text("x")
    fields = {k: v.format(d=tmp_path) if isinstance(v, str) else v for k, v in fields.items()}
    calibration = Calibration(**{"num_samples": 4, "shuffle": False, **fields})
    assert source_problems(calibration) == [expected.format(d=tmp_path)]
    with pytest.raises(CalibrationError):
        calibration_texts(calibration)


def test_messages_need_a_chat_template(tmp_path, chat_model):
    path = _jsonl(tmp_path / "chats.jsonl", [{"messages": chat} for chat in CHATS])
    calibration = Calibration(source=str(path), messages="messages", num_samples=2)
    assert source_problems(calibration, chat_model) == []
    assert source_problems(calibration, DEMO_MODEL) == [
        "calibration.messages 'messages': the model's tokenizer has no chat template; give a text column with "
        "calibration.column instead"]
    assert source_problems(calibration) == []   # no model to render with: the messages' shape is still checked


def test_column_and_messages_exclude_each_other():
    with pytest.raises(ValueError, match="column .* or messages .*, not both"):
        Calibration(source="x.jsonl", column="text", messages="messages")


# --- the exact set in the manifest ----------------------------------------------------------------------------

def test_manifest_records_the_exact_set(probe_model, tmp_path):
    """FP8 with static activation scales calibrates (observers only: quick) and records what it calibrated on."""
    from core.recipe import Variant
    from quantize import quantize_variant

    path = _jsonl(tmp_path / "c.jsonl", [{"text": f"The number {i} is written as {i}."} for i in range(12)])
    calibration = Calibration(source=str(path), num_samples=4, max_seq_length=32, seed=3)
    manifest = quantize_variant(probe_model, Variant(name="fp8", scheme="FP8", ignore=["lm_head"]), calibration,
                                tmp_path / "out")
    record = manifest["calibration"]
    assert record["texts_sha256"] == texts_sha256(calibration_texts(calibration))
    assert (record["source"], record["num_samples"], record["seed"], record["shuffle"]) == (str(path), 4, 3, True)
