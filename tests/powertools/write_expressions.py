"""Records written by Powertools for AWS Lambda (Python) itself under each
key expression the cut-over tests read (tests/tests/it/powertools_writers.rs),
the twin of typescript/write_expressions.mjs (same cases, same events, same
output).

    AWS_ENDPOINT_URL_DYNAMODB=... python write_expressions.py TABLE

Creates TABLE in Powertools' default layout (partition key `id`), then, as a
function named `orders-api` would, runs Powertools' own idempotency wrapper
once per case (the record COMPLETED; md5, 3600 s expiry, the key prefix
`orders-api.<case>`, one persistence layer per case, as each case has its own
configuration):

- `header`, `body`, `json_field` (its body's amount validated), `json_fields`
  and `tenant_header`: the API handler (`@idempotent`) on one API Gateway HTTP
  API (payload 2.0) event each, key from the expression named in CASES;
- `sqs`: `idempotent_function` on one SQS record (key `messageId`);
- `running`: the header expression, left in progress (Powertools' own
  save_inprogress, with 60 s left).

Every case's event has its own `idempotency-key` header and order id, so no
two cases share a record. Reads every record back and prints, as JSON:
{"runtime": "python", "version": ..., "cases": {CASE: {"prefix", "expression",
"validation", "event", "id"}}, "expiration": <the header record's expiration>}.
"""

import json
import os
import sys

os.environ["AWS_LAMBDA_FUNCTION_NAME"] = "orders-api"
region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
os.environ.setdefault("AWS_DEFAULT_REGION", region)

import boto3  # noqa: E402
from aws_lambda_powertools.shared.version import VERSION  # noqa: E402
from aws_lambda_powertools.utilities.idempotency import (  # noqa: E402
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
    idempotent_function,
)

BY = "powertools-python"

# Case: (event_key_jmespath, payload_validation_jmespath).
HTTP_CASES = {
    "header": ('headers."idempotency-key"', None),
    "body": ("body", None),
    "json_field": ("powertools_json(body).order_id", "powertools_json(body).amount"),
    "json_fields": ("powertools_json(body).[customer_id, order_id]", None),
    "tenant_header": ('[requestContext.authorizer.jwt.claims.sub, headers."idempotency-key"]', None),
}
SQS_EXPRESSION = "messageId"
RUNNING_EXPRESSION = 'headers."idempotency-key"'
# The header's value in each case: `h-<case>`, but for the two the tests name.
KEYS = {"header": "h-1", "running": "running-1"}


class Context:
    function_name = "orders-api"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:orders-api"
    aws_request_id = "00000000-0000-4000-8000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def http_event(case: str) -> dict:
    """A full API Gateway HTTP API (payload 2.0) POST /orders event."""
    key = KEYS.get(case, f"h-{case}")
    body = json.dumps({"order_id": f"o-{case}", "customer_id": "c-1", "amount": 2500}, separators=(",", ":"))
    return {
        "version": "2.0",
        "routeKey": "POST /orders",
        "rawPath": "/orders",
        "rawQueryString": "",
        "headers": {
            "accept": "*/*",
            "content-length": str(len(body)),
            "content-type": "application/json",
            "host": "abc123def4.execute-api.us-east-1.amazonaws.com",
            "idempotency-key": key,
            "user-agent": "curl/8.5.0",
            "x-amzn-trace-id": "Root=1-67d1dc5e-0a1b2c3d4e5f6a7b8c9d0e1f",
            "x-forwarded-for": "203.0.113.7",
            "x-forwarded-port": "443",
            "x-forwarded-proto": "https",
        },
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123def4",
            "authorizer": {"jwt": {"claims": {"sub": "tenant-a"}, "scopes": None}},
            "domainName": "abc123def4.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abc123def4",
            "http": {
                "method": "POST",
                "path": "/orders",
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.7",
                "userAgent": "curl/8.5.0",
            },
            "requestId": f"H1aBcD{case}=",
            "routeKey": "POST /orders",
            "stage": "$default",
            "time": "12/Mar/2025:19:03:58 +0000",
            "timeEpoch": 1741806238000,
        },
        "body": body,
        "isBase64Encoded": False,
    }


def sqs_record() -> dict:
    """A full SQS record as an SQS event source mapping delivers it."""
    return {
        "messageId": "m-1",
        "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a+ZzYQn0NAJkB5ONqJBBYk5d9EmrWaPNtTq6Xc8WWLdp1TUq0F3jz5m/J4bH0y8JcQW==",
        "body": '{"order_id":"o-sqs"}',
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1741806238000",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1741806238012",
        },
        "messageAttributes": {},
        "md5OfBody": "de4023976cea46937918de995f5f1698",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders-queue",
        "awsRegion": "us-east-1",
    }


def response(case: str) -> dict:
    return {
        "statusCode": 201,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"by": BY, "case": case}),
    }


def main() -> int:
    if not os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"):
        sys.exit("write_expressions.py: AWS_ENDPOINT_URL_DYNAMODB is not set (run under scripts/dynamodb-local.sh)")
    table = sys.argv[1]
    client = boto3.client("dynamodb", region_name=region)
    client.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )

    cases: dict = {}
    layers: dict = {}

    def layer_for(case: str) -> DynamoDBPersistenceLayer:
        layers[case] = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
        return layers[case]

    for case, (expression, validation) in HTTP_CASES.items():
        config = IdempotencyConfig(
            event_key_jmespath=expression,
            payload_validation_jmespath=validation,
            expires_after_seconds=3600,
        )
        prefix = f"orders-api.{case}"

        @idempotent(persistence_store=layer_for(case), config=config, key_prefix=prefix)
        def handler(event, context, case=case):
            return response(case)

        event = http_event(case)
        answer = handler(event, Context())
        assert answer == response(case), answer
        cases[case] = {"prefix": prefix, "expression": expression, "validation": validation, "event": event}

    sqs_config = IdempotencyConfig(event_key_jmespath=SQS_EXPRESSION, expires_after_seconds=3600)
    sqs_config.register_lambda_context(Context())

    @idempotent_function(
        data_keyword_argument="record",
        persistence_store=layer_for("sqs"),
        config=sqs_config,
        key_prefix="orders-api.sqs",
    )
    def process(record):
        return {"by": BY, "case": "sqs"}

    record = sqs_record()
    assert process(record=record) == {"by": BY, "case": "sqs"}
    cases["sqs"] = {"prefix": "orders-api.sqs", "expression": SQS_EXPRESSION, "validation": None, "event": record}

    running_config = IdempotencyConfig(event_key_jmespath=RUNNING_EXPRESSION, expires_after_seconds=3600)
    running_layer = layer_for("running")
    running_layer.configure(running_config, key_prefix="orders-api.running")
    running_event = http_event("running")
    running_layer.save_inprogress(data=running_event, remaining_time_in_millis=60_000)
    cases["running"] = {
        "prefix": "orders-api.running",
        "expression": RUNNING_EXPRESSION,
        "validation": None,
        "event": running_event,
    }

    # Every record, as the table holds it: one per case, found by its prefix.
    items = client.scan(TableName=table, ConsistentRead=True)["Items"]
    assert len(items) == len(cases), f"{len(items)} records for {len(cases)} cases: {items}"
    expiration = None
    for case, entry in cases.items():
        found = [item for item in items if item["id"]["S"].startswith(entry["prefix"] + "#")]
        assert len(found) == 1, f"{case}: {found}"
        item = found[0]
        record_id = item["id"]["S"]
        # The id Powertools computes for the event is the one it wrote.
        assert record_id == layers[case]._get_hashed_idempotency_key(entry["event"]), (case, record_id)
        status = item["status"]["S"]
        assert status == ("INPROGRESS" if case == "running" else "COMPLETED"), (case, item)
        entry["id"] = record_id
        if case == "header":
            expiration = int(item["expiration"]["N"])
    print(json.dumps({"runtime": "python", "version": VERSION, "cases": cases, "expiration": expiration}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
