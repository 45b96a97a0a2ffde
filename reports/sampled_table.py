"""The sampled tasks' figures (tasks with `repeats` or a reasoning trace): avg@K with its interval, pass@k,
maj@K, the no-answer rate and the reasoning tokens, one row per variant and task, for pareto.md and report.html."""

from __future__ import annotations

from core.results import Results

SAMPLED_HEADERS = ["task", "variant", "K", "avg@K [95% CI]", "pass@k", "maj@K", "no answer", "reasoning tokens"]
SAMPLED_TITLE = "Sampled tasks"
SAMPLED_NOTE = ("Each item answered K times (seeded per item and sample); an item's score is its success rate. "
                "avg@K: the mean rate (the task's score); pass@k: the unbiased chance that one of k samples is "
                "right (Chen et al.); maj@K: the score of the answer most samples gave; no answer: the share of "
                "samples with none (nothing extracted, or a reasoning trace cut before it closed).")


def sampled_rows(results: Results) -> list[list[str]]:
    rows = []
    for task in results.tasks():
        for name, variant in results.variants.items():
            acc = variant.accuracy.get(task)
            if acc is None or acc.sampling is None:
                continue
            s = acc.sampling
            low, high = s.avg.ci95
            rows.append([task, name, str(s.repeats), f"{s.avg.value:.3f} [{low:.3f}, {high:.3f}]",
                         ", ".join(f"@{k} {v:.3f}" for k, v in s.pass_at.items()) or "-",
                         f"{s.majority.value:.3f}" if s.majority else "-", f"{s.no_answer.value:.1%}",
                         f"{acc.reasoning_tokens.value:.0f}" if acc.reasoning_tokens else "-"])
    return rows
