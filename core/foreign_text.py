"""Text the suite did not write (model output, a server's words, names read from a file) made safe to show: on a
terminal, in a markdown table, in an XML attribute."""

from __future__ import annotations

import re

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")   # all but tab and newline: escapes, bells, CR


def clean_text(text: str) -> str:
    """Control characters (terminal escape sequences, OSC 52 clipboard writes, bells, carriage returns) removed;
    newlines and tabs kept."""
    return CONTROL.sub("", text)


def one_line(value) -> str | None:
    """A foreign value as one line of plain text: control characters removed, whitespace runs one space."""
    return None if value is None else " ".join(clean_text(str(value)).split())
