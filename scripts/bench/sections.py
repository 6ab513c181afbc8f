"""Sections of BENCHMARKS.md that a report script owns, between its markers."""

import re
from pathlib import Path


def replace_section(md: Path, start: str, end: str, new: str) -> None:
    """Put `new` (which starts with `start` and ends with `end`) in place of
    the section between those markers in `md`, or append it when the file
    has none yet, so each run rewrites only its own section."""
    text = md.read_text() if md.exists() else ""
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end) + "\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: new, text)
    else:
        text = text.rstrip("\n") + "\n\n" + new
    md.write_text(text)
