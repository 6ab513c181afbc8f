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


def waiting_section(w: dict) -> list[str]:
    lines = [
        "",
        "## Waiting for the first answer",
        "",
        "What `wait_for` (`IDEMPOTENCY_WAIT_FOR_RESULT_MS` in `orders-api`) costs: a retry that finds the "
        "same request in progress polls its record (one `Store::get` per poll: a consistent `GetItem` on "
        "DynamoDB, a `GET` on Redis, one `SELECT` on PostgreSQL), 50 ms after its claim, then twice as "
        "long each time up to 1 s, each interval cut by a random part of up to half. Every engine is "
        "polled, none notified: a Redis subscription or a PostgreSQL `LISTEN` would cost each waiter, "
        "an invocation of its own, one more connection (and TLS handshake) than the few reads of a wait, "
        "`LISTEN` does not work through a transaction pooler (PgBouncer; RDS Proxy pins the session), "
        "and Redis keyspace notifications are off by default and node-local in a cluster "
        "(docs/DESIGN.md, \"Waiting for the first answer\").",
        "",
        f"Per engine, {w['episodes']} episodes: a first execution of {w['first_ms']:,} ms and "
        f"{w['waiters']} duplicates arriving evenly over 10-90 % of its run, each allowed 10 s. Added "
        "latency = a waiter's answer minus the first execution's (0 when the waiter read the completed "
        "record first), in ms; store requests per waiter = the episode's round trips less the first "
        "execution's two, per waiter (its claim and its polls). The storm: "
        f"{w['storm_waiters']:,} duplicates started at once on one key held by a first execution of 2 s, "
        "all in one process (in Lambda each would be an invocation of its own).",
        "",
        "| Engine | Added latency p50 / p99 (ms) | Store requests per waiter | Storm of "
        f"{w['storm_waiters']:,}: added latency p50 / p99 (ms) | Storm: requests per waiter |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    dynamo = None
    for row in w["engines"]:
        a, s = row["added_ms"], row["storm"]
        lines.append(
            f"| {row['engine']} | {fmt_ms(a['p50'])} / {fmt_ms(a['p99'])} | "
            f"{row['requests_per_waiter']:.2f} | {fmt_ms(s['added_ms']['p50'])} / "
            f"{fmt_ms(s['added_ms']['p99'])} | {s['requests_per_waiter']:.2f} |"
        )
        if row["engine"].startswith("DynamoDB"):
            dynamo = row
    if dynamo:
        s = dynamo["storm"]
        n = w["storm_waiters"]
        reads = s["requests_per_waiter"] * n
        reads_usd = reads * DYNAMODB_USD_PER_MILLION_READS / 1e6
        held_s = s["held_ms_mean"] / 1000
        lambda_usd = n * held_s * ORDERS_API_GB * LAMBDA_ARM_USD_PER_GB_S
        lines += [
            "",
            f"**{n:,} duplicates waiting on one key**, as measured on DynamoDB Local above: "
            f"{reads:,.0f} store requests in all ({s['requests_per_waiter']:.2f} per waiter, its claim "
            f"included), each held {held_s:.2f} s on average. On AWS (us-east-1 on-demand list prices) "
            f"the reads cost ${reads_usd:.5f} (${DYNAMODB_USD_PER_MILLION_READS} per million read "
            f"request units; a consistent read of an item up to 4 KB is one), and the waiting "
            f"invocations ${lambda_usd:.5f} ({n:,} x {held_s:.2f} s x {ORDERS_API_GB * 1024:.0f} MB "
            f"on arm64 at ${LAMBDA_ARM_USD_PER_GB_S:.10f} per GB-s), against {n:,} `409`s that cost one "
            "claim each and would be retried. The held invocations are the larger cost and count "
            "against the account's concurrency. Once their polls have backed off to one a second, "
            f"{n:,} waiters read about {n:,} units a second from one item, within one partition's "
            "3,000; their first polls, 50 to 400 ms apart, go above it for a moment when they all "
            "arrive at once, and a throttled poll that the SDK's retries do not absorb answers that "
            "waiter `503` (fail closed: it never runs the handler), which the client retries.",
        ]
    return lines


def main() -> None:
    report_main("engines", START, END, section)


if __name__ == "__main__":
    main()
