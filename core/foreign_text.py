"""Text the suite did not write (model output, a server's words, names read from a file) made safe to show: on a
terminal (the `quant` command's stdout and stderr, log lines and library warnings among them: CleanStream), in
markdown, in an XML attribute. clean_text is the one cleaning every sink applies; the others build on it."""

from __future__ import annotations

import re

# C0 and C1 controls but tab and newline (escape sequences, OSC 52 clipboard writes, bells, carriage returns), and
# the bidirectional overrides and isolates that make text read in another order than it is stored (U+061C,
# U+200E/F, U+202A-202E, U+2066-2069).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str) -> str:
    """Control characters (terminal escape sequences, OSC 52 clipboard writes, bells, carriage returns) and
    bidirectional controls removed; newlines and tabs kept."""
    return CONTROL.sub("", text)


class CleanStream:
    """A text stream whose every write goes through clean_text: what the `quant` command prints, its log lines
    and the libraries' warnings reach the terminal without control characters, whoever wrote them. `raw` is the
    stream itself, for the suite's own styled console (whose messages are cleaned before they are styled)."""

    def __init__(self, raw) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(clean_text(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


def raw_stream(stream):
    """The stream under a CleanStream (else the stream itself)."""
    return getattr(stream, "raw", stream) if isinstance(stream, CleanStream) else stream


def one_line(value) -> str | None:
    """A foreign value as one line of plain text: control characters removed, whitespace runs one space."""
    return None if value is None else " ".join(clean_text(str(value)).split())


_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def markdown_cell(text) -> str:
    """Text as one cell of a markdown table (or one list item): on one line, its `|` escaped and anything that
    would open an HTML tag or comment written as text; backticks, emphasis and links stay as the writer meant
    them only for the suite's own text, so callers pass foreign text through here."""
    return _TAG.sub("&lt;", one_line(text) or "").replace("|", "\\|")


def html_text(text, quote: bool = True) -> str:
    """Text as HTML: cleaned, then escaped (a bidi override would otherwise reorder the page's text)."""
    import html

    return html.escape(clean_text(str(text)), quote=quote)


def markdown_code(text) -> str:
    """Text to show between backticks in markdown: a markdown cell that cannot close the code span."""
    return markdown_cell(text).replace("`", "'")


TEXT_LIMIT = 500   # characters of one foreign string kept in a record or a message


def capped(text, limit: int = TEXT_LIMIT) -> str:
    """Foreign text cut to `limit` characters, saying how many more there were ("… 9,999,500 more")."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… {len(text) - limit:,} more"
