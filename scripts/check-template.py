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
The second templates (deploy/valkey.yaml, deploy/postgres.yaml) get the same
bounds, and must mirror template.yaml's functions but for the store: same
build, code, timeouts, events, settings and grants, in the VPC, with an
IDEMPOTENCY_STORE_URL of their engine that holds no password.

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


def transformed(params, path="template.yaml"):
    template = yaml_parse((ROOT / path).read_text())
    # The SAM CLI uploads the built code and rewrites CodeUri to S3 first.
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = "s3://bucket/code.zip"
    return transform(copy.deepcopy(template), params, NoManagedPolicies())


def conditions_for(params):
    return {
        "HasJwtAuthorizer": bool(params.get("JwtIssuer")),
        "HasDynamoDbEndpoint": bool(params.get("DynamoDbEndpoint")),
        "HasPowertoolsCutover": bool(params.get("PowertoolsTableName")),
        "HasPowertoolsKeyJmespath": bool(params.get("PowertoolsTableName") and params.get("PowertoolsKeyJmespath")),
        "HasPowertoolsValidationJmespath": bool(
            params.get("PowertoolsTableName") and params.get("PowertoolsValidationJmespath")
        ),
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


# Variables scripts/sam-local.sh (and docs/sam-local.md's env.json) override for
# `sam local`: SAM passes a value from --env-vars only for a declared variable.
LOCAL_OVERRIDES = {
    "OrdersApiFunction": [
        "AWS_ENDPOINT_URL_DYNAMODB",
        "IDEMPOTENCY_TABLE",
        "ORDERS_TABLE",
        "SIMULATED_PROVIDER_LATENCY_MS",
        "IDEMPOTENCY_STORE_TIMEOUT_MS",
    ],
    "OrderEventsFunction": ["AWS_ENDPOINT_URL_DYNAMODB", "IDEMPOTENCY_TABLE", "ORDERS_TABLE", "IDEMPOTENCY_STORE_TIMEOUT_MS"],
    # Its stream follows AWS_ENDPOINT_URL_DYNAMODB: no streams variable needed.
    "SweeperFunction": ["AWS_ENDPOINT_URL_DYNAMODB", "IDEMPOTENCY_TABLE", "IDEMPOTENCY_STORE_TIMEOUT_MS"],
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


def offloading_functions(template):
    """Each function that offloads large responses to a bucket of the
    template: its name, its properties, its environment variables, and the
    bucket's logical id."""
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        variables = props.get("Environment", {}).get("Variables", {})
        bucket_ref = variables.get("IDEMPOTENCY_OFFLOAD_BUCKET")
        if bucket_ref is not None:
            yield name, props, variables, bucket_ref["Ref"]


def offload_violations(template, seconds, params):
    """Functions whose offloaded responses the bucket's lifecycle would expire
    before their records: a retry within the record's life would find the
    record but not its response (refused, never replayed wrongly, but not
    the answer it is owed). S3 expires an object at least N whole days after
    it was written, just before its record completed."""
    found = []
    for name, _, variables, bucket_name in offloading_functions(template):
        bucket = template["Resources"][bucket_name]["Properties"]
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
    for name, props, variables, bucket_name in offloading_functions(template):
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


def check_bounds(template, check):
    """The bounds CloudFormation cannot compare: the lease cap against the
    functions' timeouts, queue retention against record life, offload
    lifecycle against record life."""
    # A lease shorter than the invocation lets a retry run the handler twice.
    lease_margin_s = 2
    min_lease = template["Parameters"]["IdempotencyMaxLeaseSeconds"]["MinValue"]
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        variables = props.get("Environment", {}).get("Variables", {})
        # The sweeper takes no lease: it reads the writers' cap only to
        # check it against the stream's retention.
        if "IDEMPOTENCY_MAX_LEASE_SECONDS" in variables and "SWEEP_POLICY" not in variables:
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


# The second templates (deploy/README.md): the same functions with their
# idempotency records in another engine, chosen by IDEMPOTENCY_STORE_URL.
ENGINE_TEMPLATES = {
    # ElastiCache Serverless is cluster mode only: the cluster client.
    "deploy/valkey.yaml": {"scheme": "rediss://", "extra_env": {"IDEMPOTENCY_STORE_URL", "IDEMPOTENCY_REDIS_CLUSTER"}},
    "deploy/postgres.yaml": {
        "scheme": "postgres://",
        "extra_env": {"IDEMPOTENCY_STORE_URL", "IDEMPOTENCY_STORE_SECRET_ARN", "IDEMPOTENCY_CREATE_SCHEMA"},
    },
}
# What only the DynamoDB store (and `sam local` against DynamoDB Local) reads.
# The sweeper's items that keep its place in each shard of the stream
# (POSITION_PREFIX in shared/src/store/dynamodb/stream.rs, whose tests check
# this pattern is in template.yaml).
# And the full pass's place (PASS_ID there), which the same PutItem
# saves.
SWEEPER_POSITIONS = ["~sweeper/stream/*", "~sweeper/full-pass"]
DYNAMODB_ONLY_ENV = {"IDEMPOTENCY_TABLE", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_DYNAMODB_STREAMS"}
# What only the DynamoDB stream sweeper reads: the writers' longest lease (to
# check it against the stream's retention) and the full pass's period (the
# backstop of a stream listing). The other engines' sweepers list every stuck
# record through the store at every sweep and have no use for either.
STREAM_SWEEPER_ONLY_ENV = {"IDEMPOTENCY_MAX_LEASE_SECONDS", "IDEMPOTENCY_SWEEP_FULL_PASS_SECONDS"}


def sub_text(node):
    """The text of an Fn::Sub (either form), or None."""
    if isinstance(node, dict) and list(node) == ["Fn::Sub"]:
        value = node["Fn::Sub"]
        return value if isinstance(value, str) else value[0]
    return None


def statements(props):
    return [st for policy in props.get("Policies", []) if isinstance(policy, dict) for st in policy.get("Statement", [])]


def actions(statement):
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def check_sweeper_writes(template, check):
    """The sweeper's PutItem writes only its own position items."""
    props = template["Resources"]["SweeperFunction"]["Properties"]
    puts = [st for st in statements(props) if "dynamodb:PutItem" in actions(st)]
    scoped = [
        st
        for st in puts
        if actions(st) == ["dynamodb:PutItem"]
        and st.get("Condition") == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": SWEEPER_POSITIONS}}
    ]
    check(
        len(puts) == 1 and scoped == puts,
        f"SweeperFunction: PutItem is granted alone, only on keys {SWEEPER_POSITIONS} (its places in the stream and the full pass's)",
    )


def check_engine_template(path, spec, base, check):
    """One second template: its functions mirror template.yaml's (build,
    code, timeouts, events, every setting but the store's), each in the VPC
    with an IDEMPOTENCY_STORE_URL of its engine, and the bounds hold."""
    template = yaml_parse((ROOT / path).read_text())
    base_dir = ROOT
    engine_dir = (ROOT / path).parent

    def labelled(ok, what):
        check(ok, f"{path}: {what}")

    base_globals, globals_ = base["Globals"]["Function"], template["Globals"]["Function"]
    same_globals = all(globals_.get(k) == base_globals.get(k) for k in ("Runtime", "Architectures", "Handler", "MemorySize", "Timeout"))
    labelled(same_globals, "Runtime, Architectures, Handler, MemorySize and Timeout as in template.yaml")
    labelled(bool(globals_.get("VpcConfig", {}).get("SubnetIds")), "every function is in the VPC (Globals VpcConfig)")

    base_functions = {n: r for n, r in base["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}
    functions = {n: r for n, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}
    labelled(sorted(functions) == sorted(base_functions), f"the functions of template.yaml ({sorted(functions)})")
    for name, base_fn in base_functions.items():
        fn = functions.get(name)
        if fn is None:
            continue
        props, base_props = fn["Properties"], base_fn["Properties"]
        labelled(fn.get("Metadata") == base_fn.get("Metadata"), f"{name}: built as in template.yaml (Metadata)")
        same_code = (engine_dir / props["CodeUri"]).resolve() == (base_dir / base_props["CodeUri"]).resolve()
        labelled(same_code, f"{name}: CodeUri {props['CodeUri']!r} is template.yaml's code directory")
        for key in ("Timeout", "Events", "EventInvokeConfig", "Description"):
            labelled(props.get(key) == base_props.get(key), f"{name}: {key} as in template.yaml")
        env = props.get("Environment", {}).get("Variables", {})
        base_variables = base_props.get("Environment", {}).get("Variables", {})
        dynamodb_only = DYNAMODB_ONLY_ENV | (STREAM_SWEEPER_ONLY_ENV if "SWEEP_POLICY" in base_variables else set())
        base_env = {k: v for k, v in base_variables.items() if k not in dynamodb_only}
        # The functions use the same settings: a renamed or dropped one here
        # would silently change the example's contract on this engine.
        kept = {k: v for k, v in env.items() if k not in spec["extra_env"]}
        differ = sorted(k for k in set(kept) | set(base_env) if kept.get(k) != base_env.get(k))
        labelled(
            not differ,
            f"{name}: every setting of template.yaml but the DynamoDB store's, with the same value ({differ or 'all'})",
        )
        missing = sorted(spec["extra_env"] - set(env))
        labelled(not missing, f"{name}: sets {', '.join(sorted(spec['extra_env']))} ({missing or 'all'})")
        url = sub_text(env.get("IDEMPOTENCY_STORE_URL")) or ""
        labelled(url.startswith(spec["scheme"]), f"{name}: IDEMPOTENCY_STORE_URL is a {spec['scheme']} URL ({url!r})")
        userinfo = url.split("://", 1)[-1].split("@", 1)[0] if "@" in url else ""
        labelled(":" not in userinfo, f"{name}: IDEMPOTENCY_STORE_URL holds no password")
        idempotency_grants = [
            st for st in statements(props)
            if st.get("Resource") in ({"Fn::GetAtt": ["IdempotencyTable", "Arn"]}, {"Fn::GetAtt": ["IdempotencyTable", "StreamArn"]})
        ]
        labelled(not idempotency_grants, f"{name}: no grant on an idempotency table")
        # The example's own data and the offload bucket: the same grants.
        own = [st for st in statements(props) if not any(a.startswith("secretsmanager:") for a in actions(st))]
        base_own = [st for st in statements(base_props) if "IdempotencyTable" not in str(st.get("Resource"))]
        labelled(own == base_own, f"{name}: the grants of template.yaml but the idempotency table's, and no other")
        if "IDEMPOTENCY_STORE_SECRET_ARN" in spec["extra_env"]:
            secret = env.get("IDEMPOTENCY_STORE_SECRET_ARN")
            grants = [st for st in statements(props) if any(a.startswith("secretsmanager:") for a in actions(st))]
            scoped = len(grants) == 1 and actions(grants[0]) == ["secretsmanager:GetSecretValue"] and grants[0]["Resource"] == secret
            labelled(scoped, f"{name}: may read IDEMPOTENCY_STORE_SECRET_ARN's secret, and only it")
            labelled("sslmode=" in url, f"{name}: IDEMPOTENCY_STORE_URL sets sslmode ({url!r})")

    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::RDS::DBProxy":
            labelled(resource["Properties"].get("RequireTLS") is True, "RDS Proxy requires TLS")
        if resource["Type"] == "AWS::ElastiCache::ServerlessCache":
            # At a data storage maximum ElastiCache evicts keys with a TTL,
            # which every record has: an evicted record runs its key again.
            labelled("CacheUsageLimits" not in resource["Properties"], "the cache has no usage limit that could evict records")
    ingress = [
        r["Properties"] for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
    ] + [
        rule for r in template["Resources"].values() if r["Type"] == "AWS::EC2::SecurityGroup"
        for rule in r["Properties"].get("SecurityGroupIngress", [])
    ]
    labelled(
        all("CidrIp" not in rule and "CidrIpv6" not in rule for rule in ingress),
        "every ingress rule admits a security group of the stack, never an address range",
    )

    for params in ({}, {"JwtIssuer": "https://issuer.example.com/pool", "JwtAudience": "client-a"}, {"RouteTableIds": "rtb-1,rtb-2", "CreateSqsEndpoint": "true"}):
        out = transformed(params, path)
        bad = malformed_intrinsics(out)
        labelled(not bad, f"the SAM transform succeeds and every intrinsic stands alone ({params or 'default parameters'}; {bad or 'ok'})")

    # A parameter both templates declare takes the same values in both: a
    # bound missing here deploys a value the functions refuse at start.
    keys = ("Type", "MinValue", "MaxValue", "AllowedValues", "Default")
    differ = sorted(
        name
        for name, base_param in base["Parameters"].items()
        if name in template["Parameters"]
        and any(template["Parameters"][name].get(k) != base_param.get(k) for k in keys)
    )
    labelled(not differ, f"shared parameters with template.yaml's type, bounds and default ({differ or 'all alike'})")

    check_bounds(template, labelled)


def check_engine_templates(check):
    base = yaml_parse((ROOT / "template.yaml").read_text())
    for path, spec in ENGINE_TEMPLATES.items():
        check_engine_template(path, spec, base, check)


def check_retained_tables(check):
    """Every table that holds records or orders survives a stack delete and a
    replacing update: a stack change must never drop records still in flight
    (a key would run twice) or the orders themselves."""
    for path in ("template.yaml", "deploy/valkey.yaml", "deploy/postgres.yaml"):
        template = yaml_parse((ROOT / path).read_text())
        tables = {
            name: resource
            for name, resource in template["Resources"].items()
            if resource.get("Type") == "AWS::DynamoDB::Table"
        }
        check(bool(tables), f"{path}: declares its DynamoDB tables")
        for name, resource in tables.items():
            check(
                resource.get("DeletionPolicy") == "Retain"
                and resource.get("UpdateReplacePolicy") == "Retain",
                f"{path}: {name} has DeletionPolicy and UpdateReplacePolicy Retain",
            )


def check_retained_state(check):
    """What holds records besides the tables outlives a stack delete and a
    replacing update too: the offload bucket (a non-empty bucket would also
    fail the delete), the Valkey cache; the Aurora cluster leaves a
    snapshot."""
    expected = {
        "template.yaml": {"OffloadBucket": "Retain"},
        "deploy/valkey.yaml": {"OffloadBucket": "Retain", "Cache": "Retain"},
        "deploy/postgres.yaml": {"OffloadBucket": "Retain", "DatabaseCluster": "Snapshot"},
    }
    for path, resources in expected.items():
        template = yaml_parse((ROOT / path).read_text())
        for name, policy in resources.items():
            resource = template["Resources"][name]
            check(
                resource.get("DeletionPolicy") == policy and resource.get("UpdateReplacePolicy") == policy,
                f"{path}: {name} has DeletionPolicy and UpdateReplacePolicy {policy}",
            )


def role_statements(resources, function, params):
    """The statements of `function`'s role as CloudFormation would make it
    with `params`: its own policies, and those of the AWS::IAM::Policy
    resources attached to it whose condition holds."""
    conditions = conditions_for(params)
    role_name = f"{function}Role"
    documents = [p["PolicyDocument"] for p in resources[role_name]["Properties"].get("Policies", [])]
    for resource in resources.values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": role_name} not in resource["Properties"].get("Roles", []):
            continue
        if "Condition" in resource and not conditions[resource["Condition"]]:
            continue
        documents.append(resource["Properties"]["PolicyDocument"])
    return [st for document in documents for st in resolve(document["Statement"], conditions, params)]


def check_cutover(check):
    """orders-api reads Powertools' records only when a cut-over is set: its
    variables and GetItem on that table, and nothing without."""
    cutover = {
        "PowertoolsTableName": "powertools-records",
        "PowertoolsKeyPrefix": "orders-api.app.lambda_handler",
        "PowertoolsUntil": "2026-12-01T00:00:00Z",
        "PowertoolsRuntime": "typescript",
        "PowertoolsKeyJmespath": '[requestContext.authorizer.jwt.claims.sub, headers."idempotency-key"]',
        "PowertoolsValidationJmespath": "body",
        "PowertoolsSharedKeys": "false",
        "PowertoolsMaxTimeoutSeconds": "30",
    }
    names = (
        "IDEMPOTENCY_POWERTOOLS_TABLE",
        "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
        "IDEMPOTENCY_POWERTOOLS_UNTIL",
        "IDEMPOTENCY_POWERTOOLS_RUNTIME",
        "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH",
        "IDEMPOTENCY_POWERTOOLS_VALIDATION_JMESPATH",
        "IDEMPOTENCY_POWERTOOLS_SHARED_KEYS",
        "IDEMPOTENCY_POWERTOOLS_MAX_TIMEOUT_SECONDS",
    )
    # The ARN of the table PowertoolsTableName names (CloudFormation
    # substitutes the parameter).
    table_arn = {"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${PowertoolsTableName}"}
    for path in ("template.yaml", "deploy/valkey.yaml", "deploy/postgres.yaml"):
        for params in ({}, cutover):
            resources = transformed(params, path)["Resources"]
            function = resources["OrdersApiFunction"]["Properties"]
            env = resolve(function["Environment"]["Variables"], conditions_for(params), params)
            got = {n: env.get(n) for n in names}
            want = dict(zip(names, cutover.values())) if params else dict.fromkeys(names)
            label = "with PowertoolsTableName" if params else "by default"
            check(got == want, f"{path}: OrdersApiFunction's cut-over variables {label} ({got})")
            statements = role_statements(resources, "OrdersApiFunction", params)
            reads = [
                st for st in statements
                if "dynamodb:GetItem" in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
            ]
            # Its own tables: the orders, and the idempotency records (the
            # warm-up's read during init and the polls of
            # IDEMPOTENCY_WAIT_FOR_RESULT_MS; template.yaml only, the other
            # engines keep their records elsewhere).
            own = ({"Fn::GetAtt": ["OrdersTable", "Arn"]}, {"Fn::GetAtt": ["IdempotencyTable", "Arn"]})
            others = [st for st in reads if st["Resource"] not in own]
            if params:
                scoped = [st for st in others if st["Resource"] == table_arn and st["Action"] in ("dynamodb:GetItem", ["dynamodb:GetItem"])]
                check(
                    len(others) == 1 and len(scoped) == 1,
                    f"{path}: with PowertoolsTableName, OrdersApiFunction may GetItem on that table, and on no other but its own ({others})",
                )
            else:
                check(not others, f"{path}: by default, OrdersApiFunction may GetItem on its own tables only ({others or 'yes'})")


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

    template = yaml_parse((ROOT / "template.yaml").read_text())
    check_bounds(template, check)
    check_sweeper_writes(template, check)
    check_engine_templates(check)
    check_retained_tables(check)
    check_retained_state(check)
    check_cutover(check)

    if failures:
        sys.exit(f"template check: {len(failures)} failure(s)")
    print("template check: the SAM transform succeeds with and without the JWT authorizer; sam local reads the template")


if __name__ == "__main__":
    main()
