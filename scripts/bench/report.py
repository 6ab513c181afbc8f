"""Compare the Rust library's benchmark with Powertools for AWS Lambda (Python)
and write a Markdown report plus an SVG chart of the latency distributions.

    .tools/bench-venv/bin/python scripts/bench/report.py --rust rust.json \
        --powertools powertools.json --out-md BENCHMARKS.md --out-svg bench.svg

Both inputs hold per-round latency samples in microseconds (powertools.py
writes the Powertools one). Per round and kind of call (first, replay): p50 and
p99 of latency, and of overhead = latency - requests per call x bare p50 of that
round and tool, i.e. what the library adds on top of its DynamoDB round trips.
Every statistic is then the median over rounds, which keeps one noisy round
from deciding a goal. Everything in the Rust file beyond the latency part is
optional and shows as "not measured" when missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

KINDS = ("first", "replay")
KIND_NAMES = {"first": "first execution", "replay": "replay", "bare": "bare conditional PutItem"}
STATS = ("p50", "p99")
OVERHEAD_RATIO_GOAL = 0.10
CPU_GOAL_NS = 10_000
COLD_RATIO_GOAL = 0.10
RSS_GOAL_KB = 32 * 1024
NOT_MEASURED = "not measured"
OVERHEAD_TARGET = f"≤ {OVERHEAD_RATIO_GOAL:.2f}"
RUST_COLOR = "tab:orange"
POWERTOOLS_COLOR = "tab:blue"


class InputError(Exception):
    """An input file that cannot be compared; the message names file and field."""


# ---------------------------------------------------------------- loading


def load(path: Path) -> dict:
    """Read one benchmark file and check the latency part every report needs."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read benchmark JSON: {exc}") from exc
    requests = data.get("requests") or {}
    for kind in KINDS:
        if not isinstance(requests.get(kind), (int, float)):
            raise InputError(f"{path}: requests.{kind} (requests per call) is missing")
    rounds = data.get("rounds_data")
    if not isinstance(rounds, list) or not rounds:
        raise InputError(f"{path}: rounds_data is missing or empty")
    for index, round_data in enumerate(rounds):
        for field in ("bare_us", "first_us", "replay_us"):
            if not round_data.get(field):
                raise InputError(f"{path}: rounds_data[{index}].{field} is missing or empty")
    return data


# ---------------------------------------------------------------- statistics


def percentile(samples, q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    return float(np.percentile(samples, q))


def round_stats(round_data: dict, requests: dict) -> dict[str, dict[str, float]]:
    """p50/p99 of latency and overhead for each kind, within one round."""
    bare_p50 = percentile(round_data["bare_us"], 50)
    stats = {}
    for kind in KINDS:
        latency = np.asarray(round_data[f"{kind}_us"], dtype=float)
        overhead = latency - requests[kind] * bare_p50
        stats[kind] = {
            "latency_p50": percentile(latency, 50),
            "latency_p99": percentile(latency, 99),
            "overhead_p50": percentile(overhead, 50),
            "overhead_p99": percentile(overhead, 99),
        }
    return stats


def tool_stats(data: dict) -> dict[str, dict[str, float]]:
    """Each statistic's median over the rounds."""
    per_round = [round_stats(r, data["requests"]) for r in data["rounds_data"]]
    return {
        kind: {name: statistics.median(r[kind][name] for r in per_round) for name in per_round[0][kind]}
        for kind in KINDS
    }


def ratio(rust: float, reference: float) -> float | None:
    """Rust / Powertools; undefined when the reference is not positive (an
    overhead lost in the noise of the bare round trip)."""
    return rust / reference if reference > 0 else None


def median_or_none(values) -> float | None:
    return statistics.median(values) if values else None


# ---------------------------------------------------------------- comparison


@dataclass
class LatencyRow:
    """One line of the main table: a kind of call and a percentile, each value
    the median over its tool's rounds."""

    kind: str
    stat: str
    rust_latency: float
    pt_latency: float
    rust_overhead: float
    pt_overhead: float

    @property
    def overhead_ratio(self) -> float | None:
        return ratio(self.rust_overhead, self.pt_overhead)

    @property
    def latency_ratio(self) -> float | None:
        return ratio(self.rust_latency, self.pt_latency)

    @property
    def overhead_ok(self) -> bool | None:
        return None if self.overhead_ratio is None else self.overhead_ratio <= OVERHEAD_RATIO_GOAL

    @property
    def latency_ok(self) -> bool:
        return self.rust_latency <= self.pt_latency


@dataclass
class Goal:
    """One line of the goals table; ok is None when the goal could not be checked."""

    name: str
    measured: str
    target: str
    ok: bool | None
    unknown: str = NOT_MEASURED  # what an unchecked goal shows


def row_label(row: LatencyRow) -> str:
    return f"{KIND_NAMES[row.kind]} {row.stat}"


def latency_rows(rust: dict, powertools: dict) -> list[LatencyRow]:
    rust_stats, pt_stats = tool_stats(rust), tool_stats(powertools)
    return [
        LatencyRow(
            kind=kind,
            stat=stat,
            rust_latency=rust_stats[kind][f"latency_{stat}"],
            pt_latency=pt_stats[kind][f"latency_{stat}"],
            rust_overhead=rust_stats[kind][f"overhead_{stat}"],
            pt_overhead=pt_stats[kind][f"overhead_{stat}"],
        )
        for kind in KINDS
        for stat in STATS
    ]


def cold_start(rust: dict) -> tuple[float, float, float] | None:
    """Medians of both cold-start series and their ratio, when both were measured."""
    rust_ms = median_or_none(rust.get("cold_start_ms"))
    pt_ms = median_or_none(rust.get("powertools_cold_start_ms"))
    if rust_ms is None or pt_ms is None:
        return None
    return rust_ms, pt_ms, rust_ms / pt_ms


def cpu_value(rust: dict, field: str):
    """A field of the optional cpu section, None when it or the section is missing."""
    return (rust.get("cpu") or {}).get(field)


def goals(rows: list[LatencyRow], rust: dict) -> list[Goal]:
    """Every goal with its measurement, in the order of the report's sections."""
    found = [
        Goal(
            f"overhead ratio, {row_label(row)}", fmt_ratio(row.overhead_ratio), OVERHEAD_TARGET, row.overhead_ok, "n/a"
        )
        for row in rows
    ]
    found += [
        Goal(
            f"total latency, {row_label(row)}",
            f"{fmt_us(row.rust_latency)} vs {fmt_us(row.pt_latency)} µs",
            "Rust ≤ Powertools",
            row.latency_ok,
        )
        for row in rows
    ]
    for kind in KINDS:
        ns = cpu_value(rust, f"{kind}_ns")
        found.append(
            Goal(
                f"CPU per request, {KIND_NAMES[kind]}",
                NOT_MEASURED if ns is None else f"{ns / 1000:.2f} µs",
                f"< {CPU_GOAL_NS / 1000:.0f} µs",
                None if ns is None else ns < CPU_GOAL_NS,
            )
        )
    cold = cold_start(rust)
    found.append(
        Goal(
            "cold start ratio",
            NOT_MEASURED if cold is None else fmt_ratio(cold[2]),
            f"≤ {COLD_RATIO_GOAL:.2f}",
            None if cold is None else cold[2] <= COLD_RATIO_GOAL,
        )
    )
    rss = rust.get("peak_rss_kb")
    found.append(
        Goal(
            "peak RSS",
            NOT_MEASURED if rss is None else f"{rss / 1024:.1f} MB",
            f"< {RSS_GOAL_KB // 1024} MB",
            None if rss is None else rss < RSS_GOAL_KB,
        )
    )
    return found


# ---------------------------------------------------------------- formatting


def fmt_us(value: float) -> str:
    """Whole microseconds for round trips, one decimal for small overheads."""
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def fmt_requests(value) -> str:
    return NOT_MEASURED if value is None else f"{value:.2f}"


def verdict(ok: bool | None, unknown: str = NOT_MEASURED) -> str:
    """PASS/FAIL, or `unknown` when the goal could not be checked."""
    return unknown if ok is None else ("PASS" if ok else "FAIL")


def fmt_versions(data: dict) -> str:
    versions = data.get("versions") or {}
    return ", ".join(f"{name} {version}" for name, version in versions.items()) or "not recorded"


def table(header: list[str], rows: list[list[str]], text_columns: int = 1) -> list[str]:
    """A Markdown table: the first text_columns left-aligned, the numbers after them right-aligned."""
    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    return [f"| {' | '.join(cells)} |" for cells in [header, align, *rows]]


# ---------------------------------------------------------------- markdown


def header_section(rust: dict, powertools: dict) -> list[str]:
    return [
        "# Benchmarks",
        "",
        f"Command: `{rust.get('command') or 'not recorded'}` · Machine: {rust.get('machine') or 'not recorded'}",
        "",
        f"- Rust ({rust.get('tool', 'lambda-idempotency')}): {fmt_versions(rust)}; "
        f"{rust.get('iterations', '?')} calls per kind x {len(rust['rounds_data'])} rounds.",
        f"- Reference ({powertools.get('tool', 'powertools-python')}): {fmt_versions(powertools)}; "
        f"{powertools.get('iterations', '?')} calls per kind x {len(powertools['rounds_data'])} rounds.",
        "- Both run against DynamoDB Local on this machine, one call at a time, each timed alone.",
        "",
    ]


def goals_section(found: list[Goal]) -> list[str]:
    rows = [[g.name, g.measured, g.target, verdict(g.ok, unknown=g.unknown)] for g in found]
    return ["## Goals", "", *table(["Goal", "Measured", "Target", "Result"], rows, text_columns=4), ""]


def requests_section(rust: dict, powertools: dict) -> list[str]:
    labels = {
        "first": "first execution",
        "replay": "replay",
        "in_progress": "duplicate while in progress",
        "cached_replay": "replay from the in-process cache",
    }
    rows = [
        [label, fmt_requests(rust["requests"].get(key)), fmt_requests(powertools["requests"].get(key))]
        for key, label in labels.items()
    ]
    return [
        "## DynamoDB requests per invocation",
        "",
        *table(["Invocation", "Rust", "Powertools"], rows),
        "",
    ]


def latency_table(rows: list[LatencyRow]) -> list[str]:
    header = [
        "Call",
        "Rust latency (µs)",
        "Powertools latency (µs)",
        "Rust overhead (µs)",
        "Powertools overhead (µs)",
        "Overhead ratio",
        f"Overhead {OVERHEAD_TARGET}",
        "Latency ratio",
        "Latency ≤ Powertools",
    ]
    cells = [
        [
            row_label(r),
            fmt_us(r.rust_latency),
            fmt_us(r.pt_latency),
            fmt_us(r.rust_overhead),
            fmt_us(r.pt_overhead),
            fmt_ratio(r.overhead_ratio),
            verdict(r.overhead_ok, unknown="n/a"),
            fmt_ratio(r.latency_ratio),
            verdict(r.latency_ok),
        ]
        for r in rows
    ]
    return table(header, cells)


def cached_replay_line(rust: dict) -> list[str]:
    """Rust's optional replay served from its in-process cache, which has no
    Powertools counterpart in this benchmark (its local cache is off)."""
    series = [r["cached_replay_us"] for r in rust["rounds_data"] if r.get("cached_replay_us")]
    if not series:
        return []
    p50 = statistics.median(percentile(s, 50) for s in series)
    p99 = statistics.median(percentile(s, 99) for s in series)
    return [f"Rust replay from the in-process cache: p50 {fmt_us(p50)} µs, p99 {fmt_us(p99)} µs.", ""]


def latency_section(rows: list[LatencyRow], rust: dict, svg_name: str) -> list[str]:
    return [
        "## Latency and overhead",
        "",
        "Overhead = latency - requests per call x the bare conditional PutItem p50 of the same round and tool. "
        "Each figure is the median over rounds of that round's p50 or p99. Ratios are Rust / Powertools; "
        "a negative overhead means calls beat the round-trip floor of that round (noise), which passes; "
        "an overhead ratio is n/a when the Powertools overhead is not positive.",
        "",
        *latency_table(rows),
        "",
        *cached_replay_line(rust),
        f"![Latency distributions]({svg_name})",
        "",
    ]


def cpu_section(rust: dict) -> list[str]:
    rows = []
    for kind in KINDS:
        ns = cpu_value(rust, f"{kind}_ns")
        instructions = cpu_value(rust, f"{kind}_instructions")
        rows.append(
            [
                KIND_NAMES[kind],
                NOT_MEASURED if ns is None else f"{ns / 1000:.2f}",
                NOT_MEASURED if instructions is None else f"{instructions:,}",
                verdict(None if ns is None else ns < CPU_GOAL_NS),
            ]
        )
    return [
        "## CPU per request (Rust)",
        "",
        *table(["Invocation", "CPU time (µs)", "Instructions", f"< {CPU_GOAL_NS / 1000:.0f} µs"], rows),
        "",
    ]


def series_summary(values) -> str:
    if not values:
        return NOT_MEASURED
    median, low, high = statistics.median(values), min(values), max(values)
    return f"median {median:,.1f} ms (min {low:,.1f}, max {high:,.1f}, n={len(values)})"


def cold_section(rust: dict) -> list[str]:
    cold = cold_start(rust)
    result = (
        f"Ratio {fmt_ratio(cold[2])} (goal ≤ {COLD_RATIO_GOAL:.2f}): **{verdict(cold[2] <= COLD_RATIO_GOAL)}**"
        if cold
        else f"Ratio: {NOT_MEASURED}"
    )
    return [
        "## Cold start",
        "",
        "Process spawn to first response, including setup and one first execution.",
        "",
        f"- Rust: {series_summary(rust.get('cold_start_ms'))}",
        f"- Powertools: {series_summary(rust.get('powertools_cold_start_ms'))}",
        f"- {result}",
        "",
    ]


def rss_section(rust: dict) -> list[str]:
    rss = rust.get("peak_rss_kb")
    line = (
        f"Rust peak RSS: {rss / 1024:.1f} MB ({rss:,} KB), goal < {RSS_GOAL_KB // 1024} MB: "
        f"**{verdict(rss < RSS_GOAL_KB)}**"
        if rss is not None
        else f"Rust peak RSS: {NOT_MEASURED}"
    )
    return ["## Memory", "", line, ""]


def storm_section(rust: dict) -> list[str]:
    storm = rust.get("storm")
    if not storm:
        return ["## Duplicate storm", "", NOT_MEASURED, ""]
    return [
        "## Duplicate storm",
        "",
        f"{storm.get('requests', '?')} requests over {storm.get('keys', '?')} keys at concurrency "
        f"{storm.get('concurrency', '?')}: one execution per key: **{verdict(storm.get('executions_ok'))}**",
        "",
    ]


def markdown(rust: dict, powertools: dict, rows: list[LatencyRow], svg_name: str) -> str:
    lines = [
        *header_section(rust, powertools),
        *goals_section(goals(rows, rust)),
        *requests_section(rust, powertools),
        *latency_section(rows, rust, svg_name),
        *cpu_section(rust),
        *cold_section(rust),
        *rss_section(rust),
        *storm_section(rust),
    ]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- chart


def pooled(data: dict, field: str) -> list[float]:
    """One series over all rounds, for the distribution's shape."""
    return [sample for r in data["rounds_data"] for sample in r.get(field) or []]


def plot_panel(ax, kind: str, series: list[tuple[str, list[float], dict]]) -> None:
    """One kind of call: an ECDF per (label, samples, line style), with the p50 and p99 levels marked."""
    for label, samples, style in series:
        ax.ecdf(samples, label=label, **style)
    for level, name in ((0.5, "p50"), (0.99, "p99")):
        ax.axhline(level, color="0.75", linewidth=0.8, linestyle=":")
        ax.text(0.01, level, name, transform=ax.get_yaxis_transform(), va="bottom", fontsize="x-small", color="0.5")
    ax.set_xscale("log")
    ax.set_title(KIND_NAMES[kind])
    ax.set_xlabel("latency per call (µs, log scale)")
    ax.grid(True, which="major", axis="x", color="0.9")
    ax.legend(loc="lower right", fontsize="small")


def panel_series(rust: dict, powertools: dict, kind: str) -> list[tuple[str, list[float], dict]]:
    series = [
        ("Rust", pooled(rust, f"{kind}_us"), {"color": RUST_COLOR}),
        ("Powertools", pooled(powertools, f"{kind}_us"), {"color": POWERTOOLS_COLOR}),
    ]
    cached = pooled(rust, "cached_replay_us") if kind == "replay" else []
    if cached:
        series.append(("Rust, in-process cache", cached, {"color": RUST_COLOR, "linestyle": "--"}))
    return series


def chart(rust: dict, powertools: dict, path: Path) -> None:
    """ECDFs of latency per kind of call, both tools in each panel, pooled over rounds."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharex=True, sharey=True)
    for ax, kind in zip(axes, ("bare", "first", "replay"), strict=True):
        plot_panel(ax, kind, panel_series(rust, powertools, kind))
    axes[0].set_ylabel("fraction of calls ≤ x")
    fig.suptitle(
        "Idempotent invocation latency on DynamoDB Local: lambda-idempotency (Rust) vs Powertools (Python), "
        "pooled over rounds"
    )
    fig.tight_layout()
    # A fixed salt and no date keep the SVG stable: a re-run diffs only where the numbers changed.
    with plt.rc_context({"svg.hashsalt": "bench"}):
        fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


# ---------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rust", type=Path, required=True, help="the Rust benchmark JSON")
    parser.add_argument("--powertools", type=Path, required=True, help="powertools.py's JSON")
    parser.add_argument("--out-md", type=Path, required=True, help="Markdown report to write")
    parser.add_argument("--out-svg", type=Path, required=True, help="SVG chart to write (linked from the report)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    try:
        rust, powertools = load(args.rust), load(args.powertools)
    except InputError as exc:
        raise SystemExit(f"report.py: {exc}") from exc
    rows = latency_rows(rust, powertools)
    for path in (args.out_md, args.out_svg):
        path.parent.mkdir(parents=True, exist_ok=True)
    chart(rust, powertools, args.out_svg)
    args.out_md.write_text(markdown(rust, powertools, rows, args.out_svg.name))
    print("\n".join(latency_table(rows)))
    print(f"\nwrote {args.out_md} and {args.out_svg}")


if __name__ == "__main__":
    main()
