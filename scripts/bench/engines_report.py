"""Turn the engines measurement (`bench engines N`, tools/src/bin/bench/,
JSON) into the "Engines" section of BENCHMARKS.md, replacing the section
between its markers (or appending it), so `make bench-engines` updates it
alone.

    engines_report.py --engines target/bench/engines.json --md BENCHMARKS.md
"""

from __future__ import annotations

from sections import report_main

START = "<!-- engines:start (scripts/bench/engines_report.py) -->"
END = "<!-- engines:end -->"
KINDS = ("first", "replay", "in_progress")


def fmt_us(us: float | None) -> str:
    if us is None:
        return "n/a"
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def fmt_trips(trips: float | None) -> str:
    return "n/a" if trips is None else f"{trips:g}" if trips == int(trips) else f"{trips:.2f}"


def section(data: dict) -> str:
    lines = [
        START,
        "## Engines",
        "",
        "The same middleware and handler on every store engine, one engine after the other, one call "
        "at a time, each engine on a real server on loopback started for the run (`make bench-engines`; "
        "part of `make bench`). After a warm-up, each of "
        f"{data['iterations']:,} iterations times in turn the bare round trip (a read of an absent record "
        "through the store: the engine's floor), a first execution and a replay of its key; then "
        f"{data['conflicts']} duplicates while a first execution of their key is still running (in "
        f"progress; with so few, their p99 is close to their maximum). Every request carries the same {data['body_bytes']:,}-byte body. Round trips are "
        "counted around every timed call by each engine's own counter: HTTP requests by an SDK "
        "interceptor (DynamoDB), commands by `RedisStore::round_trips`, statements by "
        "`PostgresStore::round_trips`. Latencies are p50 / p99 in µs. The two cores are shared and "
        "each engine runs on them too: compare engines with each other, not with a deployment.",
        "",
        "| Engine | Round trips: first / replay / in progress | Bare round trip | First execution "
        "| Replay | In progress |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in data["engines"]:
        trips, latency = row["round_trips"], row["latency_us"]
        name = row["engine"]
        pair = lambda kind: f"{fmt_us(latency[kind]['p50'])} / {fmt_us(latency[kind]['p99'])}"
        lines.append(
            f"| {name} | {' / '.join(fmt_trips(trips.get(k)) for k in KINDS)} | {pair('bare')} | "
            f"{pair('first')} | {pair('replay')} | {pair('in_progress')} |"
        )
    versions = sorted({row["version"] for row in data["engines"] if row.get("version")})
    load = data.get("load_average") or {}
    notes = []
    if versions:
        notes.append(f"Server: {', '.join(versions)}.")
    if load.get("start") is not None and load.get("end") is not None:
        notes.append(f"1-minute load average {load['start']:g} at the start, {load['end']:g} at the end.")
    if notes:
        lines += ["", " ".join(notes)]
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> None:
    report_main("engines", START, END, section)


if __name__ == "__main__":
    main()
