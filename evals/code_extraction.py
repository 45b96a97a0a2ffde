"""Code from an instruct model's answer: the code inside its ```python fences, or the answer itself.

lm-eval's instruct code tasks end the prompt inside an opened fence (`gen_prefix`), so the answer starts as
code and the first ``` closes it. Where that leaves no code (the model closed the fence at once and wrote a
new block), the first fenced block is taken, preferring one tagged Python; with no fence at all, the whole
answer is taken as code.
"""

from __future__ import annotations

import re

from evals.code_scoring import Program, humaneval_program, mbpp_program

# An opening fence with an optional language tag, then the block up to its closing fence or the end of text.
FENCED = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.MULTILINE)
PYTHON_TAGS = {"python", "python3", "py", ""}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, code) of each fenced block, in order; a last block left open runs to the end."""
    return [(lang.lower(), code) for lang, code in FENCED.findall(text)]


def code_in_answer(answer: str, opened: bool) -> str:
    """opened: the prompt ended inside a ```python fence, so the answer starts as code."""
    if opened:
        head, _, rest = answer.partition("```")
        if head.strip():
            return head
        tag, _, after = rest.partition("\n")
        if not tag.strip():  # a bare ``` closed the opened block at once: look past it
            answer = after
    blocks = fenced_blocks(answer)
    if blocks:
        return next((code for lang, code in blocks if lang in PYTHON_TAGS), blocks[0][1])
    return answer


def humaneval_instruct_program(doc: dict, answer: str) -> Program:
    """The prompt (signature and docstring) + the completed body, or + the answer's own full function (a
    function left with only its docstring is valid Python, and the new definition replaces it)."""
    code = code_in_answer(answer, opened=True)
    if not answer.partition("```")[0].strip():
        code = "\n" + code
    return humaneval_program(doc, code)


def mbpp_instruct_program(doc: dict, answer: str) -> Program:
    return mbpp_program(doc, code_in_answer(answer, opened=True))
