"""Sections of BENCHMARKS.md that a report script owns, between its markers."""

import argparse
import json
import re
from pathlib import Path
from typing import Callable


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


def report_main(measured: str, start: str, end: str, section: Callable[[dict], str]) -> None:
    """The command line of a report script: `--<measured> FILE.json --md
    BENCHMARKS.md`; the section `section` makes of that measurement (JSON)
    replaces the one between `start` and `end` in the Markdown file."""
    parser = argparse.ArgumentParser()
    parser.add_argument(f"--{measured}", required=True, type=Path)
    parser.add_argument("--md", required=True, type=Path)
    args = parser.parse_args()
    data = json.loads(getattr(args, measured).read_text())
    replace_section(args.md, start, end, section(data))
