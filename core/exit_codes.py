"""Exit codes of every `quant` command, defined once (the gate's outcomes map onto the first four)."""

OK = 0             # pass; every variant ok (or declared unsupported); a choice for every task
FAILED = 1         # a measured regression; a variant failed; a sweep whose baseline (or every variant) was not
                   # served; no variant meets the constraints; a program escaped
BAD_INPUT = 2      # bad input, one line on stderr: a recipe (also one the engine refused), results file, policy or argument
INCONCLUSIVE = 3   # `quant gate`: too few samples to decide under the policy
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)
TERMINATED = 143   # SIGTERM (128 + SIGTERM)
