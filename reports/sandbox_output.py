"""What `quant sandbox-check` prints: every program of the hostile and scoring-integrity corpora, its verdict."""

from __future__ import annotations


def hostile_lines(outcomes: list) -> list[str]:
    return [f"  {o.name:<34} {'contained' if o.contained else 'NOT CONTAINED':<14} {o.seconds:5.2f}s  "
            f"{o.result.reason[:70]}" + (f"  harm: {'; '.join(o.harm)}" if o.harm else "") for o in outcomes]


def integrity_lines(verdicts: list) -> list[str]:
    return [f"  {v.name:<34} {f'scored {int(v.result.passed)}' if v.run else 'not run':<8}  "
            f"{'ok' if v.correct else 'WRONG':<6} {v.seconds:5.2f}s  {v.result.reason[:100]}" for v in verdicts]
