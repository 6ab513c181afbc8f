"""The cut-over section of BENCHMARKS.md, from `bench cutover`
(scripts/bench-cutover.sh)."""

from sections import report_main

START = "<!-- cutover:start -->"
END = "<!-- cutover:end -->"
# Each kind of first execution `bench cutover` measures, and its row's
# label, in the table's order.
LABELS = {
    "no_cutover": "No cut-over configured",
    "window_open": "Window open (`PowertoolsRecords`, key not in Powertools' table)",
    "window_over": "Window over",
}


def percentile(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def section(data: dict) -> str:
    rows = []
    base = percentile(data["samples"]["no_cutover_us"], 0.5)
    for kind, label in LABELS.items():
        us = data["samples"][f"{kind}_us"]
        p50 = percentile(us, 0.5)
        rows.append(
            f"| {label} | {data['requests_per_first_execution'][kind]:.0f} | {p50:,.0f} | "
            f"{percentile(us, 0.99):,.0f} | {p50 - base:+,.0f} |"
        )
    over = data["requests_per_first_execution"]["window_over"] == data["requests_per_first_execution"]["no_cutover"]
    return "\n".join(
        [
            START,
            "## Cut-over window from Powertools",
            "",
            f"A first execution through the HTTP middleware on DynamoDB Local ({data['n']} per variant, "
            "taken in turn; this library's table without stream or index). While the window is open "
            "every claim that would run the handler (a first execution, a takeover, a resumed claim) "
            "reads the Powertools record of the same key: one strongly consistent `GetItem` (1 read "
            "unit for a record up to 4 KB, or none found); so does a duplicate of a record the "
            "sweeper failed. "
            "A key Powertools completed costs that read and one write once, then replays from this "
            "library's record.",
            "",
            "| Variant | DynamoDB requests | p50 (µs) | p99 (µs) | p50 vs none (µs) |",
            "|---|---:|---:|---:|---:|",
            *rows,
            "",
            f"Once the window ends nothing is read: **{'same requests as without a cut-over' if over else 'NOT the same requests as without a cut-over'}**.",
            END,
            "",
        ]
    )


if __name__ == "__main__":
    report_main("cutover", START, END, section)
