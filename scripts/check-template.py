"""Transform template.yaml with the SAM translator, as `sam deploy` would, once
without and once with the JWT authorizer parameters, and check what API Gateway
would receive. `sam validate --lint` lints the template but does not run the
transform with chosen parameter values; this does. Then read the template as
`sam local` reads it (SAM CLI's own providers): `sam local start-api` must find
both routes without failing on the optional authorizer, and every function
must declare the variables that `--env-vars` overrides for DynamoDB Local.
Last, the settings CloudFormation cannot compare: queues keep messages no
longer than their consumer's records, and the offload bucket keeps each
function's objects no shorter (private, encrypted, each grant on its prefix).

    python scripts/check-template.py      # run by `make test` (tools venv)
"""

import copy
import sys
from pathlib import Path

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).resolve().parent.parent


class NoManagedPolicies:
    """The transform asks for AWS managed policies only to expand their names."""

    def load(self):
        return {}


def resolve(node, conditions, params):
    """Resolve Fn::If / Ref (parameters, AWS::NoValue) as CloudFormation does."""
    if isinstance(node, list):
        out = [resolve(n, conditions, params) for n in node]
        return [n for n in out if n is not NO_VALUE]
    if isinstance(node, dict):
        if list(node) == ["Fn::If"]:
            name, yes, no = node["Fn::If"]
            return resolve(yes if conditions[name] else no, conditions, params)
        if list(node) == ["Ref"]:
            ref = node["Ref"]
            if ref == "AWS::NoValue":
                return NO_VALUE
            return params.get(ref, node)
        out = {k: resolve(v, conditions, params) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}
    return node


NO_VALUE = object()


def transformed(params):
    template = yaml_parse((ROOT / "template.yaml").read_text())
    # The SAM CLI uploads the built code and rewrites CodeUri to S3 first.
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = "s3://bucket/code.zip"
    return transform(copy.deepcopy(template), params, NoManagedPolicies())


def conditions_for(params):
    return {
        "HasJwtAuthorizer": bool(params.get("JwtIssuer")),
        "HasDynamoDbEndpoint": bool(params.get("DynamoDbEndpoint")),
    }


def api_body(params):
    out = transformed(params)
    values = dict(params)
    if "JwtAudience" in values:
        values["JwtAudience"] = values["JwtAudience"].split(",")
    return resolve(out["Resources"]["OrdersHttpApi"]["Properties"]["Body"], conditions_for(params), values)


def malformed_intrinsics(node, path="$"):
    """Places where an intrinsic function shares its object with other keys
    (what the SAM transform makes of an Fn::If it cannot extend): CloudFormation
    refuses such a template."""
    found = []
    if isinstance(node, list):
        for i, n in enumerate(node):
            found += malformed_intrinsics(n, f"{path}[{i}]")
    elif isinstance(node, dict):
        if len(node) > 1 and any(k == "Ref" or k.startswith("Fn::") for k in node):
            found.append(path)
        for k, v in node.items():
            found += malformed_intrinsics(v, f"{path}.{k}")
    return found


# Variables scripts/sam-local.sh (and the README's env.json) override for
# `sam local`: SAM passes a value from --env-vars only for a declared variable.
LOCAL_OVERRIDES = {
    "OrdersApiFunction": ["AWS_ENDPOINT_URL_DYNAMODB", "IDEMPOTENCY_TABLE", "ORDERS_TABLE", "SIMULATED_PROVIDER_LATENCY_MS"],
    "OrderEventsFunction": ["AWS_ENDPOINT_URL_DYNAMODB", "IDEMPOTENCY_TABLE", "ORDERS_TABLE"],
    "SweeperFunction": ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_DYNAMODB_STREAMS", "IDEMPOTENCY_TABLE", "SWEEP_GRACE_SECONDS"],
}


def check_sam_local(check):
    """The template as `sam local invoke` / `start-api` read it."""
    from samcli.lib.providers.api_provider import ApiProvider
    from samcli.lib.providers.sam_function_provider import SamFunctionProvider
    from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider

    stacks, _ = SamLocalStackProvider.get_stacks(str(ROOT / "template.yaml"))
    try:
        routes = sorted((r.function_name, tuple(r.methods), r.path) for r in ApiProvider(stacks).routes)
        error = None
    except Exception as e:  # noqa: BLE001 - what start-api would die of
        routes, error = [], f"{type(e).__name__}: {e}"
    check(
        routes
        == [("OrdersApiFunction", ("GET",), "/orders/{order_id}"), ("OrdersApiFunction", ("POST",), "/orders")],
        f"sam local start-api: reads both routes of the HTTP API ({error or routes})",
    )
    functions = {f.name: f for f in SamFunctionProvider(stacks).get_all()}
    for name, variables in LOCAL_OVERRIDES.items():
        declared = (functions[name].environment or {}).get("Variables", {})
        missing = [v for v in variables if v not in declared]
        check(not missing, f"sam local: {name} declares {', '.join(variables)} for --env-vars ({missing or 'all'})")


def offload_violations(template, seconds, params):
    """Functions whose offloaded responses the bucket's lifecycle would expire
    before their records: a retry within the record's life would find the
    record but not its response (refused, never replayed wrongly, but not
    the answer it is owed). S3 expires an object at least N whole days after
    it was written, just before its record completed."""
    found = []
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        variables = props.get("Environment", {}).get("Variables", {})
        bucket_ref = variables.get("IDEMPOTENCY_OFFLOAD_BUCKET")
        if bucket_ref is None:
            continue
        bucket = template["Resources"][bucket_ref["Ref"]]["Properties"]
        prefix = variables.get("IDEMPOTENCY_OFFLOAD_PREFIX", "")
        expiry_node = variables.get("IDEMPOTENCY_EXPIRES_AFTER_SECONDS")
        life = seconds(expiry_node, params) if expiry_node is not None else 86400
        rules = [
            r
            for r in bucket.get("LifecycleConfiguration", {}).get("Rules", [])
            if r.get("Status") == "Enabled" and "ExpirationInDays" in r and prefix.startswith(r.get("Prefix", ""))
        ]
        if not rules:
            found.append(f"{name}: no enabled lifecycle rule expires its objects under {prefix!r}")
            continue
        days = min(seconds(r["ExpirationInDays"], params) for r in rules)
        if days * 86400 < life:
            found.append(f"{name}: objects under {prefix!r} expire after {days} day(s), before its records ({life} s)")
    return found


def check_offload(template, seconds, check):
    """The offload bucket: private, encrypted, each function's lifecycle at
    least its records' life, its grant limited to its prefix."""
    for params in (
        {},
        {"IdempotencyExpiresAfterSeconds": "172800", "OrdersApiOffloadExpirationDays": "2"},
        {"OrderEventsRetentionSeconds": "1209600", "OrderEventsOffloadExpirationDays": "14"},
    ):
        bad = offload_violations(template, seconds, params)
        check(not bad, f"offload: lifecycle expiry covers each function's records ({params or 'default parameters'}; {bad or 'ok'})")
    # The check itself catches a lifecycle shorter than the records.
    longer_records = {"IdempotencyExpiresAfterSeconds": "172800"}
    caught = offload_violations(template, seconds, longer_records)
    check(
        any(v.startswith("OrdersApiFunction") for v in caught),
        f"offload: a lifecycle shorter than the records is caught ({longer_records}: {caught})",
    )
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        variables = props.get("Environment", {}).get("Variables", {})
        bucket_ref = variables.get("IDEMPOTENCY_OFFLOAD_BUCKET")
        if bucket_ref is None:
            continue
        bucket_name = bucket_ref["Ref"]
        bucket = template["Resources"][bucket_name]["Properties"]
        block = bucket.get("PublicAccessBlockConfiguration", {})
        check(
            all(block.get(k) is True for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")),
            f"{name}: {bucket_name} blocks all public access",
        )
        check(
            bool(bucket.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration")),
            f"{name}: {bucket_name} encrypts objects at rest",
        )
        prefix = variables.get("IDEMPOTENCY_OFFLOAD_PREFIX", "")
        grants = [
            st
            for st in props.get("Policies", [{}])[0].get("Statement", [])
            if any(str(a).startswith("s3:") for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]]))
        ]
        scoped = (
            len(grants) == 1
            and sorted(grants[0]["Action"]) == ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
            and grants[0]["Resource"] == {"Fn::Sub": f"${{{bucket_name}.Arn}}/{prefix}*"}
        )
        check(
            scoped,
            f"{name}: S3 access is Put/Get/DeleteObject on {bucket_name}/{prefix}* only"
            + ("" if scoped else f" (found {[dict(g) for g in grants]})"),
        )


def operations(body):
    return [(path, method, op) for path, ops in body["paths"].items() for method, op in ops.items()]


def main():
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    open_api = api_body({})
    check(len(operations(open_api)) == 2, "without JwtIssuer: POST /orders and GET /orders/{order_id} are routed")
    check(
        all("x-amazon-apigateway-integration" in op for _, _, op in operations(open_api)),
        "without JwtIssuer: every route has its Lambda integration",
    )
    check(
        all("security" not in op for _, _, op in operations(open_api))
        and not open_api.get("components", {}).get("securitySchemes"),
        "without JwtIssuer: no authorizer",
    )

    issuer, audience = "https://issuer.example.com/pool", "client-a,client-b"
    jwt_api = api_body({"JwtIssuer": issuer, "JwtAudience": audience})
    check(
        all(op.get("security") == [{"Jwt": []}] for _, _, op in operations(jwt_api)),
        "with JwtIssuer: every route requires the JWT authorizer",
    )
    scheme = jwt_api.get("components", {}).get("securitySchemes", {}).get("Jwt", {})
    config = scheme.get("x-amazon-apigateway-authorizer", {})
    check(
        config.get("type") == "jwt"
        and config.get("jwtConfiguration") == {"issuer": issuer, "audience": ["client-a", "client-b"]},
        "with JwtIssuer: the authorizer carries the issuer and the audiences",
    )

    for params, expected in (({}, "true"), ({"JwtIssuer": issuer, "JwtAudience": audience}, "false")):
        function = transformed(params)["Resources"]["OrdersApiFunction"]["Properties"]
        env = resolve(function["Environment"]["Variables"], conditions_for(params), params)
        check(
            env.get("IDEMPOTENCY_ALLOW_ANONYMOUS") == expected,
            f"{'with' if params else 'without'} JwtIssuer: IDEMPOTENCY_ALLOW_ANONYMOUS is {expected}",
        )

    for params in ({}, {"JwtIssuer": issuer, "JwtAudience": audience}):
        bad = malformed_intrinsics(transformed(params))
        check(not bad, f"{'with' if params else 'without'} JwtIssuer: every intrinsic stands alone ({bad or 'ok'})")

    # AWS_ENDPOINT_URL_DYNAMODB is declared for `sam local`, but deployed with
    # the default parameters it is not set at all: nothing changes in AWS.
    local = "http://127.0.0.1:8000"
    for params, expected in (({}, None), ({"DynamoDbEndpoint": local}, local)):
        resources = transformed(params)["Resources"]
        for name in LOCAL_OVERRIDES:
            env = resolve(resources[name]["Properties"]["Environment"]["Variables"], conditions_for(params), params)
            check(
                env.get("AWS_ENDPOINT_URL_DYNAMODB") == expected,
                f"{name}: AWS_ENDPOINT_URL_DYNAMODB is {'not set' if expected is None else expected}"
                f" {'by default' if not params else 'with DynamoDbEndpoint'}",
            )

    check_sam_local(check)

    # A lease shorter than the invocation lets a retry run the handler twice.
    template = yaml_parse((ROOT / "template.yaml").read_text())
    lease_margin_s = 2
    min_lease = template["Parameters"]["IdempotencyMaxLeaseSeconds"]["MinValue"]
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        variables = props.get("Environment", {}).get("Variables", {})
        if "IDEMPOTENCY_MAX_LEASE_SECONDS" in variables:
            timeout = props.get("Timeout", template["Globals"]["Function"]["Timeout"])
            check(
                min_lease >= timeout + lease_margin_s,
                f"{name}: IdempotencyMaxLeaseSeconds MinValue {min_lease} covers its Timeout {timeout} + {lease_margin_s} s margin",
            )

    # Retention: a message must never outlive the idempotency record of its
    # consumer, or a redelivery (a retry, a redrive from the dead-letter queue)
    # after the record expired runs the handler again. CloudFormation rules
    # cannot compare numbers, so the check resolves both, with the default
    # parameters and with others.
    def seconds(node, params):
        value = resolve(node, {}, params)
        if isinstance(value, dict) and list(value) == ["Ref"]:
            value = template["Parameters"][value["Ref"]]["Default"]
        return int(value)

    sqs_default = 345600  # SQS keeps a message 4 days unless told otherwise
    for params in ({}, {"OrderEventsRetentionSeconds": "1209600"}, {"OrderEventsRetentionSeconds": "3600"}):
        for name, resource in template["Resources"].items():
            props = resource.get("Properties", {})
            for event in props.get("Events", {}).values():
                if event.get("Type") != "SQS":
                    continue
                queue_name = event["Properties"]["Queue"]["Fn::GetAtt"][0]
                queue = template["Resources"][queue_name]["Properties"]
                queues = [(queue_name, queue)]
                redrive = queue.get("RedrivePolicy", {}).get("deadLetterTargetArn")
                if redrive:
                    dlq = redrive["Fn::GetAtt"][0]
                    queues.append((dlq, template["Resources"][dlq]["Properties"]))
                variables = props.get("Environment", {}).get("Variables", {})
                expiry_node = variables.get("IDEMPOTENCY_EXPIRES_AFTER_SECONDS")
                expiry = seconds(expiry_node, params) if expiry_node is not None else 86400
                for qname, qprops in queues:
                    retention = seconds(qprops.get("MessageRetentionPeriod", sqs_default), params)
                    check(
                        retention <= expiry,
                        f"{name}: {qname} keeps messages {retention} s, at most its records' life {expiry} s"
                        f" ({params or 'default parameters'})",
                    )

    check_offload(template, seconds, check)

    if failures:
        sys.exit(f"template check: {len(failures)} failure(s)")
    print("template check: the SAM transform succeeds with and without the JWT authorizer; sam local reads the template")


if __name__ == "__main__":
    main()
