from pathlib import Path

from evals.demo import code_gen
from evals.execute import run_program
from evals.registry import local_test_split

HERE = Path(__file__).resolve().parent


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return code_gen.prompt_of(doc)


def program_of(doc, completion: str) -> str:
    return f"{doc['prompt']}{completion}\n\n{doc['test']}\ncheck({doc['entry_point']})\n"


def process_results(doc, results):
    outcome = run_program(program_of(doc, results[0]))
    return {"pass@1": float(outcome.passed)}
