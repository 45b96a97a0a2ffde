import json
from pathlib import Path

from evals import extraction_scoring, item_errors
from evals.registry import local_test_split

HERE = Path(__file__).resolve().parent


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return extraction_scoring.prompt_of(doc)


def doc_to_target(doc):
    return json.dumps(extraction_scoring.gold_of(doc))


def scores(doc, results):
    return extraction_scoring.score(doc, results[0])


process_results = item_errors.guarded(scores, ("field_f1", "json_valid", "exact_match", "schema_valid"))
