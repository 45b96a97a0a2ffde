from pathlib import Path

from evals import code_scoring
from demo.tasks import code_gen
from evals.registry import local_test_split

HERE = Path(__file__).resolve().parent


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return code_gen.prompt_of(doc)


prefetch, process_results = code_scoring.task_functions(code_scoring.humaneval_program)
