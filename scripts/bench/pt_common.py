"""What the Powertools benchmark and the cold-start probe share: the client, the
decorated handler, the request body and a fake Lambda context.

Both scripts must exercise the very same handler, so that the warm latencies
and the cold start describe one function, the way a user of Powertools for AWS
Lambda (Python) would write it.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from dataclasses import dataclass

import boto3
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)

BODY_BYTES = 1000
LOCAL_CACHE_ITEMS = 1000
STATUS_CREATED = 201
RUN_HINT = (
    "run it under scripts/dynamodb-local.sh, e.g. "
    "scripts/dynamodb-local.sh .tools/bench-venv/bin/python scripts/bench/powertools.py --out /tmp/pt.json"
)

BODY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "body.json")


def _load_body() -> str:
    """The request body of every benchmark, Rust and Python alike: a fixed
    1,000-byte JSON order in body.json, also compiled into the Rust benchmark
    driver and the divan micro benchmarks (include_str!), so both libraries
    hash and store the very same bytes."""
    with open(BODY_FILE, encoding="utf-8") as f:
        body = f.read().rstrip("\n")
    if len(body.encode()) != BODY_BYTES:
        raise fail(f"{BODY_FILE} holds {len(body.encode())} bytes, expected {BODY_BYTES}")
    json.loads(body)  # it must stay valid JSON
    return body


@dataclass(frozen=True)
class FakeLambdaContext:
    """The attributes of a real LambdaContext. Powertools only calls
    get_remaining_time_in_millis(), to set the in-progress expiry of the record;
    the rest is there so the handler sees a plausible context."""

    function_name: str = "powertools-bench"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:powertools-bench"
    memory_limit_in_mb: int = 1024
    aws_request_id: str = "00000000-0000-4000-8000-000000000000"
    log_group_name: str = "/aws/lambda/powertools-bench"
    log_stream_name: str = "2024/01/01/[$LATEST]00000000000000000000000000000000"

    def get_remaining_time_in_millis(self) -> int:
        """A fixed 30 s left, as for a function with a 30 s timeout just started."""
        return 30_000


def fail(message: str) -> SystemExit:
    """An exit with the script's name and a message on stderr, for the errors a
    user can fix (environment, table), where a traceback would only hide the cause."""
    return SystemExit(f"{os.path.basename(sys.argv[0])}: {message}")


BODY = _load_body()


def make_client():
    """The one DynamoDB client everything uses, pointed at DynamoDB Local.

    boto3 reads AWS_ENDPOINT_URL_DYNAMODB by itself; the check that it did keeps
    a stray setting (AWS_IGNORE_CONFIGURED_ENDPOINT_URLS, a profile) from sending
    the benchmark anywhere else. The region is passed explicitly because botocore
    reads AWS_DEFAULT_REGION but not AWS_REGION, which is what
    scripts/dynamodb-local.sh exports (as Lambda does)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    if not endpoint:
        raise fail(f"AWS_ENDPOINT_URL_DYNAMODB is not set; {RUN_HINT}")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise fail(f"neither AWS_REGION nor AWS_DEFAULT_REGION is set; {RUN_HINT}")
    client = boto3.client("dynamodb", region_name=region)
    if client.meta.endpoint_url.rstrip("/") != endpoint.rstrip("/"):
        raise fail(
            f"boto3 resolved the DynamoDB endpoint to {client.meta.endpoint_url}, "
            f"not AWS_ENDPOINT_URL_DYNAMODB={endpoint}; refusing to run elsewhere than DynamoDB Local"
        )
    return client


def create_table(client, prefix: str) -> str:
    """A fresh table with Powertools' default schema (partition key `id`, S),
    so no record from an earlier run can turn a first execution into a replay."""
    name = f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    return name


def make_event(key: str) -> dict:
    """An API Gateway-style request carrying the idempotency key in a header."""
    return {"headers": {"Idempotency-Key": key}, "body": BODY}


def make_config(local_cache: bool = False) -> IdempotencyConfig:
    """The handler's idempotency configuration (see make_handler)."""
    return IdempotencyConfig(
        event_key_jmespath='headers."Idempotency-Key"',
        payload_validation_jmespath="body",
        expires_after_seconds=3600,
        use_local_cache=local_cache,
        local_cache_max_items=LOCAL_CACHE_ITEMS,
    )


# The name Powertools gives make_handler's handler in its record keys
# (`<module>.<qualified name>`), for records saved without calling it.
HANDLER_NAME = "pt_common.make_handler.<locals>.handler"


def make_handler(client, table_name: str, local_cache: bool = False):
    """The handler under test, decorated as the Powertools documentation shows:
    key from the Idempotency-Key header, payload validated on the body, records
    kept one hour, in a table with Powertools' default schema (partition key `id`).
    With local_cache, Powertools' in-process LRU of completed records is on
    (`use_local_cache`), the counterpart of the Rust layer's `.local_cache(..)`."""
    layer = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)
    config = make_config(local_cache)

    @idempotent(persistence_store=layer, config=config)
    def handler(event: dict, context: FakeLambdaContext) -> dict:
        return {
            "statusCode": STATUS_CREATED,
            "headers": {"content-type": "application/json"},
            "body": event["body"],
        }

    return handler
