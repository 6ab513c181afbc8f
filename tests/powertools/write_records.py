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
- the event function (`idempotent_function`, key `order_id`) completes
  `o-1` with `{"charged": 2500, "order_id": "o-1"}` and `o-2` (an integer
  key, 42) with `{"charged": 1}`.

Prints the id prefixes Powertools used, as JSON: {"http": ..., "event": ...}.
"""

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
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/json", "location": "/orders/1"},
            "body": json.dumps({"order": json.loads(event["body"]), "by": "powertools"}),
        }

    def request(key: str) -> dict:
        return {"headers": {"idempotency-key": key}, "body": '{"amount":2500}'}

    for key in ("done-1", "done-2", "done-3"):
        response = lambda_handler(request(key), Context())
        assert response["statusCode"] == 201, response
    http_layer.save_inprogress(data=request("running-1"), remaining_time_in_millis=60_000)

    event_layer = DynamoDBPersistenceLayer(table_name=event_table, boto3_client=client, key_attr="pk", sort_key_attr="sk")
    event_config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=3600)
    event_config.register_lambda_context(Context())

    @idempotent_function(data_keyword_argument="order", persistence_store=event_layer, config=event_config)
    def charge(order):
        return {"charged": order["amount"], "order_id": order["order_id"]} if order["order_id"] != 42 else {"charged": 1}

    charge(order={"order_id": "o-1", "amount": 2500})
    charge(order={"order_id": 42, "amount": 1})
    print(json.dumps({"http": http_layer.function_name, "event": event_layer.function_name, "event_partition": event_layer.static_pk_value}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
