"""Transform template.yaml with the SAM translator, as `sam deploy` would, once
without and once with the JWT authorizer parameters, and check what API Gateway
would receive. `sam validate --lint` lints the template but does not run the
transform with chosen parameter values; this does.

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


def api_body(params):
    out = transformed(params)
    conditions = {"HasJwtAuthorizer": bool(params.get("JwtIssuer"))}
    values = dict(params)
    if "JwtAudience" in values:
        values["JwtAudience"] = values["JwtAudience"].split(",")
    return resolve(out["Resources"]["OrdersHttpApi"]["Properties"]["Body"], conditions, values)


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
        env = resolve(function["Environment"]["Variables"], {"HasJwtAuthorizer": bool(params)}, params)
        check(
            env.get("IDEMPOTENCY_ALLOW_ANONYMOUS") == expected,
            f"{'with' if params else 'without'} JwtIssuer: IDEMPOTENCY_ALLOW_ANONYMOUS is {expected}",
        )

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

    if failures:
        sys.exit(f"template check: {len(failures)} failure(s)")
    print("template check: the SAM transform succeeds with and without the JWT authorizer")


if __name__ == "__main__":
    main()
