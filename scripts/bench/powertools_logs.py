"""Log bytes per invocation of Powertools for AWS Lambda (Python), the
counterpart of `bench logs` (tools/src/bin/bench/logs.rs).

    scripts/dynamodb-local.sh .tools/bench-venv/bin/python scripts/bench/powertools_logs.py N > out.json

The scenario is `orders-api`'s, written as a Powertools user would: the
idempotent handler of pt_common (key from the Idempotency-Key header, body
validated), Powertools' Metrics utility counting the same three outcomes the
Rust middleware counts (a first execution in the handler, a replay in
IdempotencyConfig's response_hook, a key in progress where the wrapper turns
IdempotencyAlreadyInProgressError into a 409), flushed by
`@metrics.log_metrics`. Logging is what the Lambda Python runtime sets up
(the root logger at WARNING, Powertools' own loggers left alone).

Everything the function writes to stdout and stderr is counted, per kind, as
Lambda forwards it to CloudWatch Logs. Lambda's platform lines (START, END,
REPORT) are the same for every function and left out, as on the Rust side.
In-progress records are written by Powertools itself (save_inprogress of the
persistence layer the handler uses), as a first request still running would
leave them.
"""

from __future__ import annotations

import io
import json
import logging
import sys

sys.dont_write_bytecode = True
import pt_common  # noqa: E402
from aws_lambda_powertools import Metrics  # noqa: E402
from aws_lambda_powertools.metrics import MetricUnit  # noqa: E402
from aws_lambda_powertools.utilities.idempotency import (  # noqa: E402
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (  # noqa: E402
    IdempotencyAlreadyInProgressError,
)


class Counted(io.TextIOBase):
    """A stream that keeps what is written to it (the function's log)."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    def write(self, s: str) -> int:
        self.chunks.append(s)
        return len(s)

    def take(self) -> str:
        text = "".join(self.chunks)
        self.chunks.clear()
        return text


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    if n < 1:
        raise pt_common.fail("N must be at least 1")
    client = pt_common.make_client()
    table = pt_common.create_table(client, "powertools-logs")
    metrics = Metrics(namespace="LambdaIdempotency", service="orders-api")

    def replayed(response, _record):
        metrics.add_metric(name="Replayed", unit=MetricUnit.Count, value=1)
        return response

    layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    config = IdempotencyConfig(
        event_key_jmespath='headers."Idempotency-Key"',
        payload_validation_jmespath="body",
        expires_after_seconds=3600,
        response_hook=replayed,
    )

    @idempotent(persistence_store=layer, config=config)
    def create_order(event: dict, context) -> dict:
        metrics.add_metric(name="Claimed", unit=MetricUnit.Count, value=1)
        return {"statusCode": 201, "headers": {"content-type": "application/json"}, "body": event["body"]}

    @metrics.log_metrics
    def handler(event: dict, context) -> dict:
        try:
            return create_order(event, context)
        except IdempotencyAlreadyInProgressError:
            metrics.add_metric(name="InProgressConflict", unit=MetricUnit.Count, value=1)
            return {"statusCode": 409, "body": '{"title":"in progress"}'}

    out, err = Counted(), Counted()
    real_stdout = sys.stdout
    # The Lambda Python runtime's logging: a handler on the root logger at
    # WARNING, writing to the function's log.
    logging.basicConfig(stream=err, level=logging.WARNING, force=True)
    context = pt_common.FakeLambdaContext()

    def run(kind: str, keys: list[str], status: int) -> dict:
        sys.stdout, sys.stderr = out, err
        try:
            for key in keys:
                response = handler(pt_common.make_event(key), context)
                if response.get("statusCode") != status:
                    raise pt_common.fail(f"{kind}: status {response.get('statusCode')!r}, expected {status}")
        finally:
            sys.stdout, sys.stderr = real_stdout, sys.__stderr__
        text = out.take() + err.take()
        lines = text.splitlines()
        return {
            "bytes": len(text.encode()) / len(keys),
            "sample": lines[: len(lines) // len(keys)],
        }

    run("start", ["start"], 201)
    keys = [f"first-{i}" for i in range(n)]
    first = run("first", keys, 201)
    replay = run("replay", keys, 201)
    held = [f"held-{i}" for i in range(n)]
    for key in held:
        layer.save_inprogress(data=pt_common.make_event(key), remaining_time_in_millis=120_000)
    in_progress = run("in_progress", held, 409)
    print(
        json.dumps(
            {
                "invocations_per_kind": n,
                "bytes_per_invocation": {
                    "first": first["bytes"],
                    "replay": replay["bytes"],
                    "in_progress": in_progress["bytes"],
                },
                "sample_lines": {
                    "first": first["sample"],
                    "replay": replay["sample"],
                    "in_progress": in_progress["sample"],
                },
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
