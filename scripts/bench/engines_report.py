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
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
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
    if data.get("waiting"):
        lines += waiting_section(data["waiting"])
    lines.append(END)
    return "\n".join(lines) + "\n"


# What a waiter costs on AWS, for the 1,000-waiter statement (us-east-1
# list prices, on-demand): a strongly consistent read of an item up to 4 KB
# is one read request unit; orders-api runs on arm64 with 256 MB.
DYNAMODB_USD_PER_MILLION_READS = 0.125
LAMBDA_ARM_USD_PER_GB_S = 0.0000133334
ORDERS_API_GB = 0.25


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "n/a"
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}"


def fmt_pair(p: dict | None) -> str:
    return "n/a" if not p else f"{fmt_ms(p['p50'])} / {fmt_ms(p['p99'])}"


def waiting_section(w: dict) -> list[str]:
    lines = [
        "",
        "## Waiting for the first answer",
        "",
        "What `wait_for` (`IDEMPOTENCY_WAIT_FOR_RESULT_MS` in `orders-api`) costs: a retry that finds the "
        "same request in progress polls its record (one `Store::get` per poll: a consistent `GetItem` on "
        "DynamoDB, a `GET` on Redis, one `SELECT` on PostgreSQL). The claim holding the key carries when "
        "it expects to finish (the median of its process's last durations): a waiter sleeps until then, "
        "then polls 20 ms later and half as long again each time, up to 250 ms; without an estimate, "
        "50 ms after its claim and growing the same way; each interval cut by a random part of up to half. "
        "Waiters in one process share one read per poll and wake when that process stores the outcome "
        "(docs/DESIGN.md, \"Waiting for a duplicate\").",
        "",
        f"Per engine, {w['episodes']} episodes: a first execution of {w['first_ms']:,} ms and "
        f"{w['waiters']} duplicates arriving evenly over 10-90 % of its run, each allowed 10 s, each with "
        "a configuration of its own (as if in a process of its own: no shared read, no wake-up). The "
        "first execution's configuration is kept across the episodes, as a warm function's is: in the "
        "first episode it has no duration to estimate from, in the next ones it has. Added latency = a "
        "waiter's answer minus the first execution's (0 when the waiter read the completed record first), "
        "in ms, p50 / p99 over all the episodes' waiters and, apart, over the first episode's; store "
        "requests per waiter = the episode's round trips less the first execution's two, per waiter (its "
        "claim and its polls). Goal (issue 54): p50 at most 50 ms, p99 at most 250 ms, at most 8 "
        "requests per waiter.",
        "",
        "| Engine | Added latency p50 / p99 (ms) | First episode only | Store requests per waiter |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in w["engines"]:
        lines.append(
            f"| {row['engine']} | {fmt_pair(row['added_ms'])} | "
            f"{fmt_pair(row.get('first_episode_added_ms'))} | {row['requests_per_waiter']:.2f} |"
        )
    n = w["storm_waiters"]
    lines += [
        "",
        f"**Storms**: {n:,} duplicates started at once on one key held by a first execution of 2 s, all "
        "in the first execution's process (Lambda Managed Instances, `run_concurrent`), or each with a "
        "configuration of its own (one Lambda invocation each). The first execution's process has run "
        "one untimed 2 s call before (its estimate is right), or only the episodes' "
        f"{w['first_ms']:,} ms calls (its estimate is a second early). Peak reads = the most `Store::get`s sent in any one "
        "second, and in any 100 ms, against one DynamoDB partition's 3,000 strongly consistent reads a "
        "second.",
        "",
        "| Engine | Where | Estimate | Added latency p50 / p99 (ms) | Requests per waiter | Peak reads in 1 s / in 100 ms "
        "| Held (s, mean) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    dynamo = None
    for row in w["engines"]:
        for storm in row["storms"]:
            where = "one process" if storm["process"] == "one" else "a process each"
            lines.append(
                f"| {row['engine']} | {where} | {storm['estimate']} | {fmt_pair(storm['added_ms'])} | "
                f"{storm['requests_per_waiter']:.2f} | {storm['peak_reads_per_s']:,} / "
                f"{storm['peak_reads_per_100ms']:,} | {storm['held_ms_mean'] / 1000:.2f} |"
            )
            if row["engine"].startswith("DynamoDB") and storm["process"] == "own" and storm["estimate"] == "right":
                dynamo = storm
    if dynamo:
        reads = dynamo["requests_per_waiter"] * n
        held_s = dynamo["held_ms_mean"] / 1000
        reads_usd = reads * DYNAMODB_USD_PER_MILLION_READS / 1e6
        lambda_usd = n * held_s * ORDERS_API_GB * LAMBDA_ARM_USD_PER_GB_S
        lines += [
            "",
            f"**{n:,} duplicates waiting on one key, each a Lambda invocation of its own**, as measured on "
            f"DynamoDB Local above: {reads:,.0f} store requests in all ({dynamo['requests_per_waiter']:.2f} "
            f"per waiter, its claim included), each held {held_s:.2f} s on average. On AWS (us-east-1 "
            f"on-demand list prices) the requests cost about ${reads_usd:.5f} "
            f"(${DYNAMODB_USD_PER_MILLION_READS} per million read request units; a consistent read of an item "
            f"up to 4 KB is one), and the waiting invocations ${lambda_usd:.5f} ({n:,} x {held_s:.2f} s x "
            f"{ORDERS_API_GB * 1024:.0f} MB on arm64 at ${LAMBDA_ARM_USD_PER_GB_S:.10f} per GB-s), against "
            f"{n:,} `409`s that cost one claim each and would be retried. The held invocations are the "
            "larger cost and count against the account's concurrency. Where the peak above passes 3,000 "
            "reads in a second, a throttled poll that the SDK's retries do not absorb answers that waiter "
            "`503` (fail closed: it never runs the handler), which the client retries.",
        ]
    return lines


def main() -> None:
    report_main("engines", START, END, section)


if __name__ == "__main__":
    main()
