"""The log section of BENCHMARKS.md, from `bench logs` and powertools_logs.py
(scripts/bench-logs.sh)."""

import argparse
import json
from pathlib import Path

from sections import replace_section

START = "<!-- logs:start -->"
END = "<!-- logs:end -->"
KINDS = (("first", "First execution"), ("replay", "Replay"), ("in_progress", "Key in progress (409)"))


def section(rust: dict, powertools: dict) -> str:
    r, p = rust["bytes_per_invocation"], powertools["bytes_per_invocation"]
    rows = []
    for kind, label in KINDS:
        verdict = "fewer" if r[kind] < p[kind] else "NOT fewer"
        rows.append(f"| {label} | {r[kind]:.0f} | {p[kind]:.0f} | {verdict} |")
    passed = all(r[k] < p[k] for k, _ in KINDS)
    sample = lambda data, kind: "\n".join(data["sample_lines"][kind])
    return "\n".join(
        [
            START,
            "## Log bytes per invocation",
            "",
            "CloudWatch Logs bills ingestion per byte. What each function writes per invocation "
            f"({rust['invocations_per_kind']} invocations of each kind, stdout and stderr together; "
            "Lambda's own START/END/REPORT lines are the same for both and left out): "
            f"`orders-api` as template.yaml deploys it ({', '.join(rust['settings'])}), and "
            "Powertools for AWS Lambda (Python) with its Metrics utility counting the same outcomes "
            "(the handler counts a first execution, IdempotencyConfig's response_hook a replay, "
            "the wrapper a key in progress), logging as the Lambda Python runtime sets it up "
            "(scripts/bench/powertools_logs.py).",
            "",
            "| Invocation | lambda-idempotency (bytes) | Powertools Python (bytes) | Goal: fewer |",
            "|---|---:|---:|---|",
            *rows,
            "",
            f"Goal, fewer bytes than Powertools on every kind: **{'PASS' if passed else 'FAIL'}**. "
            "Both write one EMF line per invocation; the middleware gathers every count of an "
            "invocation (one HTTP request, one event, a whole batch) into that line, and its "
            "per-request log lines are at debug level.",
            "",
            "A first execution's line, lambda-idempotency:",
            "",
            "```json",
            sample(rust, "first"),
            "```",
            "",
            "Powertools Python:",
            "",
            "```json",
            sample(powertools, "first"),
            "```",
            END,
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--logs", required=True, type=Path)
    parser.add_argument("--powertools", required=True, type=Path)
    parser.add_argument("--md", required=True, type=Path)
    args = parser.parse_args()
    rust = json.loads(args.logs.read_text())
    powertools = json.loads(args.powertools.read_text())
    replace_section(args.md, START, END, section(rust, powertools))


if __name__ == "__main__":
    main()
