"""Measure Powertools for AWS Lambda (Python) idempotency on DynamoDB Local, the
reference the Rust library is compared with.

    scripts/dynamodb-local.sh .tools/bench-venv/bin/python scripts/bench/powertools.py \
        --iterations 1000 --rounds 5 --out target/bench/powertools.json

Each round times N iterations, one call per sample, each iteration one call of
every kind in turn: a bare conditional PutItem (the round-trip floor the
overhead is measured against), a first execution of a fresh key, a replay of
that now completed key, and a replay served by Powertools' local cache
(`use_local_cache`). The per-round samples go to --out in microseconds;
report.py turns them into statistics. The table is created fresh and deleted at
the end.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

# pt_common sits in the work tree, which ignores no __pycache__: compile it in memory.
sys.dont_write_bytecode = True
import pt_common  # noqa: E402

WARMUP_CALLS = 1000
PROBE_CALLS = 20


class RequestCounter:
    """Counts the HTTP requests the client actually sends. botocore emits
    before-send once per attempt, retries included, right before the request
    goes on the wire, so the count is what DynamoDB sees."""

    def __init__(self, client):
        self.by_operation: collections.Counter[str] = collections.Counter()
        client.meta.events.register("before-send.dynamodb", self._on_send)

    def _on_send(self, event_name: str, **_) -> None:
        # Returning None lets botocore send the request as usual.
        self.by_operation[event_name.rsplit(".", 1)[-1]] += 1

    def reset(self) -> None:
        self.by_operation.clear()

    def total(self) -> int:
        return sum(self.by_operation.values())


def timed(call, arg) -> tuple[float, object]:
    """One call timed alone with perf_counter_ns: (µs, result). Results are
    checked after the round, not inside the timing."""
    start = time.perf_counter_ns()
    result = call(arg)
    return (time.perf_counter_ns() - start) / 1000, result


class Bench:
    """The kinds of call, on one table and one client: a bare conditional
    PutItem, the decorated handler (first execution and replay), and the same
    handler with Powertools' local cache on (cached replay)."""

    def __init__(self, client, table: str):
        self.client = client
        self.table = table
        self.handler = pt_common.make_handler(client, table)
        self.cached_handler = pt_common.make_handler(client, table, local_cache=True)
        self.context = pt_common.FakeLambdaContext()
        self._serial = itertools.count()
        # The key the cached replays repeat: completed once through the cached
        # handler, which keeps the record in its LRU.
        self.cached_event = pt_common.make_event(self.fresh_keys("cached", 1)[0])
        check_responses([self.cached_handler(self.cached_event, self.context)])

    def fresh_keys(self, kind: str, n: int) -> list[str]:
        """Keys never used before in this (fresh) table."""
        return [f"{kind}-{next(self._serial)}" for _ in range(n)]

    def put(self, key: str):
        """A conditional PutItem of a small new item: the cheapest write that
        still takes DynamoDB's conditional path, like the idempotency claim."""
        return self.client.put_item(
            TableName=self.table,
            Item={"id": {"S": key}},
            ConditionExpression="attribute_not_exists(id)",
        )

    def invoke(self, event: dict):
        return self.handler(event, self.context)

    def invoke_cached(self, event: dict):
        return self.cached_handler(event, self.context)

    def round(self, n: int) -> dict[str, list[float]]:
        """N iterations, each timing one of every kind in turn (so drift of the
        machine or of DynamoDB Local hits every kind alike): a bare PutItem, a
        first execution of a fresh key, a replay of that key, and a cached
        replay. Events are built before their call is timed."""
        data: dict[str, list[float]] = {"bare_us": [], "first_us": [], "replay_us": [], "cached_replay_us": []}
        responses = []
        bare_keys = self.fresh_keys("bare", n)
        for bare_key, key in zip(bare_keys, self.fresh_keys("order", n), strict=True):
            us, _ = timed(self.put, bare_key)
            data["bare_us"].append(us)
            for field, call, event in (
                ("first_us", self.invoke, pt_common.make_event(key)),
                ("replay_us", self.invoke, pt_common.make_event(key)),
                ("cached_replay_us", self.invoke_cached, self.cached_event),
            ):
                us, response = timed(call, event)
                data[field].append(us)
                responses.append(response)
        check_responses(responses)
        return data


def check_responses(responses: list) -> None:
    """Every call, first or replay, must answer the handler's 201 with the body
    (a replay: the stored response, unchanged); anything else means the
    benchmark timed something other than idempotent invocations."""
    for response in responses:
        if response.get("statusCode") != pt_common.STATUS_CREATED or response.get("body") != pt_common.BODY:
            raise RuntimeError(f"unexpected handler response: {str(response)[:200]}")


def requests_per_call(bench: Bench, counter: RequestCounter) -> dict[str, float]:
    """Average requests per first execution, replay and cached replay, over
    PROBE_CALLS each, counted on the wire by botocore's before-send event."""
    keys = bench.fresh_keys("probe", PROBE_CALLS)
    probes = {
        "first": (bench.invoke, [pt_common.make_event(k) for k in keys]),
        "replay": (bench.invoke, [pt_common.make_event(k) for k in keys]),
        "cached_replay": (bench.invoke_cached, [bench.cached_event] * PROBE_CALLS),
    }
    measured = {}
    for kind, (call, events) in probes.items():
        counter.reset()
        check_responses([call(event) for event in events])
        measured[kind] = counter.total() / PROBE_CALLS
        log(f"requests per {kind}: {measured[kind]:.2f} ({format_operations(counter.by_operation)})")
    return measured


def format_operations(by_operation: collections.Counter) -> str:
    return ", ".join(f"{op} x{count}" for op, count in sorted(by_operation.items()))


def create_table(client) -> str:
    """A fresh table for one run (pt_common.create_table)."""
    return pt_common.create_table(client, "powertools-bench")


def delete_table(client, name: str) -> None:
    """Best effort: a failure here must not hide the error that ended the run."""
    try:
        client.delete_table(TableName=name)
    except (BotoCoreError, ClientError) as exc:
        log(f"could not delete table {name}: {exc}")


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "aws-lambda-powertools": metadata.version("aws-lambda-powertools"),
        "boto3": metadata.version("boto3"),
    }


def log(message: str) -> None:
    """Progress goes to stderr; stdout stays empty for callers that parse it."""
    print(f"powertools: {message}", file=sys.stderr, flush=True)


def round_summary(data: dict[str, list[float]]) -> str:
    return ", ".join(
        f"{field.removesuffix('_us')} p50 {statistics.median(samples):.0f} us" for field, samples in data.items()
    )


def run(client, table: str, iterations: int, rounds: int) -> dict:
    """Warm-up (discarded: connection pool, JIT of DynamoDB Local, Python caches),
    the timed rounds, then the request probe; returns what report.py reads."""
    bench = Bench(client, table)
    counter = RequestCounter(client)
    bench.round(WARMUP_CALLS)
    rounds_data = []
    for index in range(rounds):
        rounds_data.append(bench.round(iterations))
        log(f"round {index + 1}/{rounds}: {round_summary(rounds_data[-1])}")
    return {
        "tool": "powertools-python",
        "versions": versions(),
        "iterations": iterations,
        "rounds": rounds,
        "requests": requests_per_call(bench, counter),
        "rounds_data": rounds_data,
    }


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=positive_int, default=1000, help="samples per kind and round")
    parser.add_argument("--rounds", type=positive_int, default=5, help="rounds (statistics are medians over them)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    client = pt_common.make_client()
    try:
        table = create_table(client)
    except (BotoCoreError, ClientError) as exc:
        raise pt_common.fail(
            f"cannot create the table on {client.meta.endpoint_url}: {exc}; {pt_common.RUN_HINT}"
        ) from exc
    log(f"table {table}: {args.rounds} rounds of {args.iterations} calls per kind")
    try:
        result = run(client, table, args.iterations, args.rounds)
    finally:
        delete_table(client, table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
