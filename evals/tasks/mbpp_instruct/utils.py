from evals import code_scoring
from evals.code_extraction import mbpp_instruct_program
from evals.tasks.mbpp.utils import list_fewshot_samples  # noqa: F401 - lm-eval's three shots, as for mbpp

prefetch, process_results = code_scoring.task_functions(mbpp_instruct_program)
