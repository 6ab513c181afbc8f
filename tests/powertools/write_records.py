"""Records written by Powertools for AWS Lambda (Python) itself, for the
cut-over tests (tests/tests/it/powertools_cutover.rs).

    AWS_ENDPOINT_URL_DYNAMODB=... python write_records.py HTTP_TABLE EVENT_TABLE

Creates HTTP_TABLE in Powertools' default layout (partition key `id`) and
EVENT_TABLE with a sort key (`pk`, `sk`, as `sort_key_attr="sk"` lays it
out), then, as a function named `orders-api` would:

- the API handler (key from the `idempotency-key` header, the body validated)
  completes `done-1`, `done-2` and `done-3` (status 201, the body echoed in
  an `order` field, a `location` header), and leaves `running-1` in progress
  (what a first request still running leaves: Powertools' own
  save_inprogress);
- it completes three requests as API Gateway sends them in rarer forms: the
  key `"quoted-1"` in the header's quoted form (the quotes are part of the
  text Powertools hashed), `nobody-1` without a body (`body` null) and
  `binary-1` with the bytes of BINARY_BODY base64-encoded (`isBase64Encoded`);
  their `order` field echoes the body as the handler got it;
- the event function (`idempotent_function`, key `order_id`) completes
  `o-1` with `{"charged": 2500, "order_id": "o-1"}` and `o-2` (an integer
  key, 42) with `{"charged": 1}`, and leaves `o-3` in progress.

Prints the id prefixes Powertools used, the `expiration` of `done-1`'s
record and the keys of `done-1`'s and `o-1`'s records, as JSON: {"http":
..., "event": ..., "event_partition": ..., "done_1_expiration": ...,
"done_1_id": ..., "o_1_sort_key": ...}.
"""

import base64
import json
import os
import sys

os.environ["AWS_LAMBDA_FUNCTION_NAME"] = "orders-api"
region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
os.environ.setdefault("AWS_DEFAULT_REGION", region)

import boto3  # noqa: E402
from aws_lambda_powertools.utilities.idempotency import (  # noqa: E402
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
    idempotent_function,
)


# The bytes of `binary-1`'s body (not UTF-8), as the Rust test sends them.
BINARY_BODY = bytes([0, 159, 146, 150, 1, 2])


class Context:
    function_name = "orders-api"
    aws_request_id = "00000000-0000-4000-8000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def main() -> int:
    if not os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"):
        sys.exit("write_records.py: AWS_ENDPOINT_URL_DYNAMODB is not set (run under scripts/dynamodb-local.sh)")
    http_table, event_table = sys.argv[1], sys.argv[2]
    client = boto3.client("dynamodb", region_name=region)
    client.create_table(
        TableName=http_table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.create_table(
        TableName=event_table,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )

    http_layer = DynamoDBPersistenceLayer(table_name=http_table, boto3_client=client)
    http_config = IdempotencyConfig(
        event_key_jmespath='headers."idempotency-key"',
        payload_validation_jmespath="body",
        expires_after_seconds=3600,
    )

    @idempotent(persistence_store=http_layer, config=http_config)
    def lambda_handler(event, context):
        body = event.get("body")
        order = json.loads(body) if body is not None and not event.get("isBase64Encoded") else body
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/json", "location": "/orders/1"},
            "body": json.dumps({"order": order, "by": "powertools"}),
        }

    def request(key: str) -> dict:
        return {"headers": {"idempotency-key": key}, "body": '{"amount":2500}'}

    for key in ("done-1", "done-2", "done-3"):
        response = lambda_handler(request(key), Context())
        assert response["statusCode"] == 201, response
    http_layer.save_inprogress(data=request("running-1"), remaining_time_in_millis=60_000)
    rare_forms = [
        request('"quoted-1"'),
        {"headers": {"idempotency-key": "nobody-1"}, "body": None},
        {
            "headers": {"idempotency-key": "binary-1"},
            "body": base64.b64encode(BINARY_BODY).decode(),
            "isBase64Encoded": True,
        },
    ]
    for event in rare_forms:
        response = lambda_handler(event, Context())
        assert response["statusCode"] == 201, response

    event_layer = DynamoDBPersistenceLayer(table_name=event_table, boto3_client=client, key_attr="pk", sort_key_attr="sk")
    event_config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=3600)
    event_config.register_lambda_context(Context())

    @idempotent_function(data_keyword_argument="order", persistence_store=event_layer, config=event_config)
    def charge(order):
        return {"charged": order["amount"], "order_id": order["order_id"]} if order["order_id"] != 42 else {"charged": 1}

    charge(order={"order_id": "o-1", "amount": 2500})
    charge(order={"order_id": 42, "amount": 1})
    event_layer.save_inprogress(data={"order_id": "o-3", "amount": 1}, remaining_time_in_millis=60_000)
    done_1 = client.get_item(
        TableName=http_table,
        Key={"id": {"S": http_layer._get_hashed_idempotency_key(request("done-1"))}},
        ConsistentRead=True,
    )["Item"]
    print(
        json.dumps(
            {
                "http": http_layer.function_name,
                "event": event_layer.function_name,
                "event_partition": event_layer.static_pk_value,
                "done_1_expiration": int(done_1["expiration"]["N"]),
                # The keys of the two completed records the fault harness
                # reads back (tests/tests/it/fault_harness.rs).
                "done_1_id": http_layer._get_hashed_idempotency_key(request("done-1")),
                "o_1_sort_key": event_layer._get_hashed_idempotency_key({"order_id": "o-1", "amount": 2500}),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
