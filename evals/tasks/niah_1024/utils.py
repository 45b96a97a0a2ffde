from pathlib import Path

from evals import needle
from evals.registry import local_test_split

HERE = Path(__file__).resolve().parent


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return needle.prompt_of(doc)


def process_results(doc, results):
    return {"exact_match": needle.score(doc, results[0])}
