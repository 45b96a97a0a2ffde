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


_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def markdown_cell(text) -> str:
    """Text as one cell of a markdown table (or one list item): on one line, its `|` escaped and anything that
    would open an HTML tag or comment written as text; backticks, emphasis and links stay as the writer meant
    them only for the suite's own text, so callers pass foreign text through here."""
    return _TAG.sub("&lt;", one_line(text) or "").replace("|", "\\|")


TEXT_LIMIT = 500   # characters of one foreign string kept in a record or a message


def capped(text, limit: int = TEXT_LIMIT) -> str:
    """Foreign text cut to `limit` characters, saying how many more there were ("… 9,999,500 more")."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… {len(text) - limit:,} more"
