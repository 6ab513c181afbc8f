"""The "Other engines" section of BENCHMARKS.md, from the JSON files of
tools/src/bin/bench_engines.rs (one per engine): replaced in place, or
appended when the file has none yet."""

import argparse
import json
import re

HEADING = "## Other engines"


def fmt(us):
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def section(results):
    lines = [
        HEADING,
        "",
        "The same middleware and handler as above on the other store engines, each on a real "
        "server on loopback, one call at a time (`make bench-engines`). Round trips are "
        "statements (or commands) the store sent, counted by the store: a probe of 50 calls "
        "per kind (10 for a duplicate in progress), and around every timed call. Latencies "
        "are p50 / p99 in µs; the bare round trip is the engine's floor (`SELECT 1` on the "
        "store's pool).",
        "",
        "| Engine | Round trips: first / replay / in progress (probe) | Round trips, timed first / replay | Bare round trip | First execution | Replay |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in results:
        probe, timed, lat = r["round_trips_probe"], r["round_trips_timed"], r["latency"]
        pair = lambda k: f'{fmt(lat[k]["p50_us"])} / {fmt(lat[k]["p99_us"])}'
        lines.append(
            f'| {r["server"]} | {probe["first"]:.2f} / {probe["replay"]:.2f} / '
            f'{probe["in_progress"]:.2f} | {timed["first"]:.2f} / {timed["replay"]:.2f} | '
            f'{pair("bare")} | {pair("first")} | {pair("replay")} |'
        )
    lines.append("")
    lines.append(f'{results[0]["iterations"]:,} calls per kind per engine.')
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--md", required=True)
    parser.add_argument("results", nargs="+")
    args = parser.parse_args()
    results = [json.load(open(path)) for path in args.results]
    text = open(args.md).read()
    new = section(results)
    pattern = re.compile(re.escape(HEADING) + r"\n.*?(?=\n## |\Z)", re.S)
    if pattern.search(text):
        text = pattern.sub(new.rstrip("\n"), text)
    else:
        text = text.rstrip("\n") + "\n\n" + new
    open(args.md, "w").write(text)


if __name__ == "__main__":
    main()
