"""Turn the capacity measurement (tools/src/bin/capacity.rs, JSON) into the
"What a request costs" section of BENCHMARKS.md, replacing the section between
its markers (or appending it), so `make bench-capacity` updates it alone.

    capacity_report.py --capacity target/bench/capacity.json --md BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sections import replace_section

START = "<!-- capacity:start (scripts/bench/capacity_report.py) -->"
END = "<!-- capacity:end -->"

# On-demand, us-east-1, Standard table class, since 1 November 2024 (AWS cut
# on-demand throughput prices by half that day).
WRITE_PRICE = 0.625  # dollars per million write request units
READ_PRICE = 0.125  # dollars per million read request units
PRICES = (
    "on-demand prices in us-east-1, Standard table class, in effect since 1 November 2024 "
    "([AWS: DynamoDB lowers pricing for on-demand throughput]"
    "(https://aws.amazon.com/blogs/database/new-amazon-dynamodb-lowers-pricing-for-on-demand-throughput-and-global-tables/), "
    "[on-demand pricing](https://aws.amazon.com/dynamodb/pricing/on-demand/)): "
    f"${WRITE_PRICE} per million write request units, ${READ_PRICE} per million read request units"
)
SIZES = [("200", "200 B"), ("1000", "1 KB"), ("10000", "10 KB")]
KINDS = [
    ("first", "first execution"),
    ("replay", "replay"),
    ("duplicate", "duplicate in progress"),
    ("cached_replay", "cached replay"),
]


def dollars(units: dict) -> float:
    """Dollars per million invocations of a kind measured at `units` per call."""
    return units["write"] * WRITE_PRICE + units["read"] * READ_PRICE


def units_cell(units: dict) -> str:
    """`w` write units (table + index + failed conditional), `r` read units."""
    parts = [f"{units['write']:g} W"]
    if units.get("index_write"):
        parts.append(f"(of which {units['index_write']:g} index)")
    if units.get("read"):
        parts.append(f"+ {units['read']:g} R")
    return " ".join(parts)


def section(data: dict) -> str:
    ours, pt = data["lambda_idempotency"], data.get("powertools", {})
    lines = [
        START,
        "## What a request costs in DynamoDB capacity",
        "",
        f"Consumed capacity per invocation (averages of {data['calls_per_figure']} calls), metered by one "
        "proxy for both libraries (`tests/src/capacity_proxy.rs`: it adds "
        "`ReturnConsumedCapacity=INDEXES` to every request and sums what DynamoDB Local reports for "
        "the table and its indexes). A failed conditional write (a replay, a duplicate) is billed on "
        "real DynamoDB too (\"If the expression evaluates to false, DynamoDB still consumes write "
        "capacity units from the table\", [AWS]"
        "(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html)), "
        "on the larger of the existing item and the attempted one; DynamoDB Local reports nothing for "
        "it, so the proxy applies that rule to the item the failure returns. Responses are the request "
        "body echoed (JSON with a hex field, compressible about as well as typical API JSON). "
        "`W` write units, `R` read units; dollars per million invocations at " + PRICES + ".",
        "",
        "| kind | size | lambda-idempotency | $ / M | Powertools (Python) | $ / M |",
        "|---|---|---|---|---|---|",
    ]
    for kind, label in KINDS:
        for size, size_label in SIZES:
            mine = ours[size][kind]
            theirs = pt.get(size, {}).get(kind)
            lines.append(
                f"| {label} | {size_label} | {units_cell(mine)} | {dollars(mine):.3f} | "
                + (f"{units_cell(theirs)} | {dollars(theirs):.3f} |" if theirs else "not measured | |")
            )
    orders = data.get("orders_api")
    if orders:
        first = orders["first"]
        lines += [
            "",
            "`orders-api` as a process (claim, two recovery points, the order, completion of a small "
            f"response), on the idempotency table: first execution {units_cell(first)} "
            f"(table {first['table_write']:g}, index {first['index_write']:g}; "
            f"{dollars(first):.3f} $ / M), replay {units_cell(orders['replay'])}.",
        ]
    sweeper = data.get("sweeper")
    if sweeper:
        idle, busy = sweeper["idle_sweep"], sweeper["sweep_of_100_stuck"]
        lines += [
            "",
            "The sweeper finds stuck records in the table's stream, which costs no table capacity "
            "(a Lambda trigger reads a stream for free; the sweeper reads it with the SDK, "
            "$0.02 per 100,000 `GetRecords` calls after 2.5 million free a month, each call up to "
            "1,000 records). On the table, a sweep of an idle table consumes "
            f"{units_cell(idle)} ({idle['requests']:g} requests: the sweeper's place in each stream "
            "shard, read and saved, and the full pass's place read, which says no pass is due; "
            "DynamoDB Local's stream has one shard); a sweep resolving 100 stuck "
            f"records among 100 completed ones consumes {units_cell(busy)} "
            f"({busy['requests']:g} requests: one fenced write per stuck record, and the places).",
        ]
    full_pass = (sweeper or {}).get("full_pass")
    if full_pass:
        per_million = full_pass_per_million(full_pass)
        lines += [
            "",
            f"A full pass of the table (the stream's backstop) read {full_pass['read']:g} read "
            f"units over {full_pass['items']:g} items (mostly completed records of a 1 KB "
            f"response): {per_million:,.0f} read units per million stored records per pass "
            "(docs/SCALING.md gives the cost at each period).",
        ]
    lines += [END]
    return "\n".join(lines) + "\n"


SCALING_START = "<!-- full-pass:start (scripts/bench/capacity_report.py) -->"
SCALING_END = "<!-- full-pass:end -->"
# Periods of IDEMPOTENCY_SWEEP_FULL_PASS_SECONDS shown, in seconds.
PERIODS = [(900, "15 minutes"), (3600, "1 hour (the default)"), (6 * 3600, "6 hours"), (86400, "24 hours")]


def full_pass_per_million(full_pass: dict) -> float:
    """Read units one pass costs per million stored records, as measured."""
    return full_pass["read"] / full_pass["items"] * 1_000_000


def scaling_section(data: dict) -> str:
    """The full pass's cost at each period, per million stored records."""
    full_pass = data["sweeper"]["full_pass"]
    per_million = full_pass_per_million(full_pass)
    lines = [
        SCALING_START,
        f"Measured by `make bench-capacity` on DynamoDB Local: one pass read {full_pass['read']:g} "
        f"read units over {full_pass['items']:g} items, {per_million:,.0f} units per million "
        "stored records (a Scan reads eventually consistent, half a unit per 4 KB; records with "
        "larger responses cost more).",
        "",
        "| full-pass period | passes a month | read units a month per million records | $ a month per million records |",
        "|---|---|---|---|",
    ]
    for seconds, label in PERIODS:
        passes = 30 * 86400 // seconds
        units = per_million * passes
        lines.append(f"| {label} | {passes:,} | {units / 1e6:,.1f} million | {units / 1e6 * READ_PRICE:,.2f} |")
    lines += [SCALING_END]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity", required=True, type=Path)
    parser.add_argument("--md", required=True, type=Path)
    parser.add_argument("--scaling", type=Path, help="docs/SCALING.md: its full-pass table")
    args = parser.parse_args()
    data = json.loads(args.capacity.read_text())
    replace_section(args.md, START, END, section(data))
    if args.scaling and data.get("sweeper", {}).get("full_pass"):
        replace_section(args.scaling, SCALING_START, SCALING_END, scaling_section(data))


if __name__ == "__main__":
    main()
