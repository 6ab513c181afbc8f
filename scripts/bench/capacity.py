"""One phase of the capacity benchmark on Powertools for AWS Lambda (Python),
run by the Rust driver (tools/src/bin/capacity.rs) in its own process, through
the driver's metering proxy (AWS_ENDPOINT_URL_DYNAMODB), so the proxy's
readings around the process are the phase's units.

    capacity.py --table T --body FILE --phase first|replay|hold|duplicate|cached --prefix P --count N

first: N fresh keys, each a first execution (the handler echoes the body).
replay: the same N keys again. hold: N more keys left in progress (saved the
way Powertools saves them before running the handler), not measured.
duplicate: those N keys, each answered IdempotencyAlreadyInProgressError.
cached: one key completed, then N replays from Powertools' local cache; it
prints how many requests the replays made (botocore's before-send count).
The handler is the latency benchmark's (pt_common.make_handler), so both
benchmarks measure one function. The table (Powertools' default schema) is
created when missing.
"""

from __future__ import annotations

import argparse
import json
import sys

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)

sys.dont_write_bytecode = True
import pt_common  # noqa: E402


def ensure_table(client, table: str) -> None:
    try:
        client.describe_table(TableName=table)
    except client.exceptions.ResourceNotFoundException:
        client.create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--body", required=True)
    parser.add_argument("--phase", required=True, choices=["first", "replay", "hold", "duplicate", "cached"])
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args()
    with open(args.body, encoding="utf-8") as f:
        body = f.read()
    client = pt_common.make_client()
    ensure_table(client, args.table)
    context = pt_common.FakeLambdaContext()
    event = lambda key: {"headers": {"Idempotency-Key": key}, "body": body}  # noqa: E731

    if args.phase in ("first", "replay"):
        handler = pt_common.make_handler(client, args.table)
        for i in range(args.count):
            response = handler(event(f"{args.prefix}-k-{i}"), context)
            if response.get("statusCode") != 201 or response.get("body") != body:
                raise SystemExit(f"capacity.py: unexpected response {str(response)[:200]}")
    elif args.phase == "hold":
        # Saved as the decorator saves them before running the handler, under
        # the handler's name, so they carry the keys the duplicate phase computes.
        layer = DynamoDBPersistenceLayer(table_name=args.table, boto3_client=client)
        layer.configure(pt_common.make_config(), function_name=pt_common.HANDLER_NAME)
        for i in range(args.count):
            layer.save_inprogress(data=event(f"{args.prefix}-dup-{i}"), remaining_time_in_millis=30_000)
    elif args.phase == "duplicate":
        handler = pt_common.make_handler(client, args.table)
        for i in range(args.count):
            try:
                handler(event(f"{args.prefix}-dup-{i}"), context)
            except IdempotencyAlreadyInProgressError:
                continue
            raise SystemExit("capacity.py: a duplicate in progress was not refused")
    else:
        handler = pt_common.make_handler(client, args.table, local_cache=True)
        counter = pt_common_counter(client)
        handler(event(f"{args.prefix}-cached"), context)
        counter.clear()
        for _ in range(args.count):
            handler(event(f"{args.prefix}-cached"), context)
        print(json.dumps({"requests_per_replay": sum(counter.values()) / args.count}))


def pt_common_counter(client) -> dict:
    """Requests on the wire, by operation (botocore's before-send, retries included)."""
    counts: dict = {}

    def on_send(event_name: str, **_) -> None:
        counts[event_name] = counts.get(event_name, 0) + 1

    client.meta.events.register("before-send.dynamodb", on_send)
    return counts


if __name__ == "__main__":
    main()
