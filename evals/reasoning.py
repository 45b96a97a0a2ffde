"""Reasoning traces: the answer is what the model says after its trace, and a trace cut short is no answer.

A model marks its trace with a pair of tags in the text (<think> ... </think>), or the server's reasoning
parser returns it in a separate field (vLLM's `reasoning`, formerly `reasoning_content`), the text holding only
the answer. A trace that never closed (the generation budget ran out inside it) leaves no answer: scoring its
text would score a half-finished thought (lm-eval issue 3382)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Split:
    reasoning: str      # the trace, without its tags ("" where the model gave none)
    answer: str         # what is scored
    cut: bool           # the trace never closed: no answer


def split_tags(text: str, tags: tuple[str, str], prompt: str = "") -> Split:
    """The trace between the tags and the answer after the closing one. A trace opened in the prompt (a chat
    template that ends with the opening tag) counts as opened."""
    opening, closing = tags
    opened = opening in text or prompt.rstrip().endswith(opening)
    if closing in text:
        trace, answer = text.split(closing, 1)
        return Split(trace.split(opening, 1)[-1].strip(), answer, False)
    if opened:
        return Split(text.split(opening, 1)[-1].strip(), "", True)
    return Split("", text, False)


def split_server(text: str, reasoning: object, finish_reason: object) -> Split:
    """The server parsed the trace out: a trace with no answer after it, where the budget ran out, was cut."""
    trace = reasoning if isinstance(reasoning, str) else ""
    cut = bool(trace) and not text.strip() and finish_reason == "length"
    return Split(trace.strip(), "" if cut else text, cut)


def server_reasoning(choice: dict) -> object:
    return choice.get("reasoning", choice.get("reasoning_content"))
