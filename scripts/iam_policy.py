"""A small evaluator of AWS IAM identity policies, for scripts/check-iam.py.

Searched first: on PyPI, policyuniverse and parliament expand and lint
actions but evaluate nothing; moto's access control (moto.iam.
access_control, already installed for the local S3 server) evaluates, but
turns an Allow whose condition fails into a Deny and matches Resource
patterns as unescaped regular expressions. On crates.io, aws-iam 0.2.2's
offline evaluation calls itself "not exhaustive"; iam-rs (kept, in Rust)
evaluates policies with conditions, and scripts/check-iam.py makes every
evaluation a second time with it (tools/src/bin/iam-evaluate.rs), failing
where the two disagree; but this check runs where SAM's translator does
(Python), and must fail loudly on a condition it cannot decide rather than
read a missing key as AWS does. (On npm, @cloud-copilot/iam-simulate
simulates AWS's evaluation with per-action context keys: not tried.) So
this implements what the templates need, after AWS's
"Policy evaluation logic" page:

- an explicit Deny wins, else an Allow allows, else the call is denied
  (implicitly);
- Action / NotAction (case-insensitive) and Resource / NotResource
  (case-sensitive), with the `*` and `?` wildcards;
- Condition operators StringEquals, StringNotEquals, StringLike,
  StringNotLike, Bool, the first four also with the ForAllValues: and
  ForAnyValue: set qualifiers.

Anything else fails loudly (UnsupportedPolicy): another operator, an
`...IfExists` operator, a condition key the call's context does not carry
(AWS would treat a missing key per operator; here a grant whose condition
cannot be decided is an error, never a silent allow), a Principal in an
identity policy.

Tested by scripts/test_iam_policy.py (run first by scripts/check-iam.py).
"""

import re

ALLOW = "allow"
IMPLICIT_DENY = "implicit deny"
EXPLICIT_DENY = "explicit deny"


class UnsupportedPolicy(Exception):
    """A policy element or condition this evaluator cannot decide."""


def as_list(value):
    return value if isinstance(value, list) else [value]


def wildcard(pattern, value, case_sensitive=True):
    """IAM's wildcard match: `*` any run of characters, `?` any one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    flags = 0 if case_sensitive else re.IGNORECASE
    return re.fullmatch(regex, value, flags) is not None


def _string_match(operator, pattern, value):
    if operator in ("StringEquals", "StringNotEquals"):
        return pattern == value
    if operator in ("StringLike", "StringNotLike"):
        return wildcard(pattern, value)
    raise UnsupportedPolicy(f"condition operator {operator}")


STRING_OPERATORS = ("StringEquals", "StringNotEquals", "StringLike", "StringNotLike")


def condition_holds(condition, context):
    """Every operator block of `condition` holds for `context` (a dict of
    condition key -> value or list of values; keys compared case-insensitively)."""
    ctx = {k.lower(): v for k, v in context.items()}
    for full_operator, keys in condition.items():
        qualifier, _, operator = full_operator.rpartition(":")
        if operator.endswith("IfExists"):
            raise UnsupportedPolicy(f"condition operator {full_operator}")
        if qualifier not in ("", "ForAllValues", "ForAnyValue"):
            raise UnsupportedPolicy(f"condition qualifier {qualifier}")
        for key, patterns in keys.items():
            if key.lower() not in ctx:
                raise UnsupportedPolicy(f"condition key {key} is not known for this call ({full_operator})")
            values = ctx[key.lower()]
            patterns = [str(p) for p in as_list(patterns)]
            negated = operator in ("StringNotEquals", "StringNotLike")
            if operator == "Bool":
                if qualifier or isinstance(values, list):
                    raise UnsupportedPolicy(f"{full_operator} on a multi-valued key {key}")
                if str(values).lower() not in [p.lower() for p in patterns]:
                    return False
                continue
            if operator not in STRING_OPERATORS:
                raise UnsupportedPolicy(f"condition operator {full_operator}")

            def matches(value):
                hit = any(_string_match(operator, p, str(value)) for p in patterns)
                return not hit if negated else hit

            if qualifier == "ForAllValues":
                if not isinstance(values, list):
                    raise UnsupportedPolicy(f"{full_operator} on a single-valued key {key}")
                if not all(matches(v) for v in values):
                    return False
            elif qualifier == "ForAnyValue":
                if not isinstance(values, list):
                    raise UnsupportedPolicy(f"{full_operator} on a single-valued key {key}")
                if not any(matches(v) for v in values):
                    return False
            else:
                if isinstance(values, list):
                    raise UnsupportedPolicy(f"{full_operator} on a multi-valued key {key}: use ForAllValues/ForAnyValue")
                if not matches(values):
                    return False
    return True


def statement_applies(statement, action, resource, context):
    """Does `statement` apply to `action` on `resource` in `context`?"""
    if "Principal" in statement or "NotPrincipal" in statement:
        raise UnsupportedPolicy("Principal in an identity policy")
    if "Action" in statement:
        if not any(wildcard(a, action, case_sensitive=False) for a in as_list(statement["Action"])):
            return False
    elif "NotAction" in statement:
        if any(wildcard(a, action, case_sensitive=False) for a in as_list(statement["NotAction"])):
            return False
    else:
        raise UnsupportedPolicy("a statement with neither Action nor NotAction")
    if "Resource" in statement:
        if not any(wildcard(r, resource) for r in as_list(statement["Resource"])):
            return False
    elif "NotResource" in statement:
        if any(wildcard(r, resource) for r in as_list(statement["NotResource"])):
            return False
    else:
        raise UnsupportedPolicy("a statement with neither Resource nor NotResource")
    return condition_holds(statement.get("Condition", {}), context)


def evaluate(statements, action, resource, context=None):
    """(decision, the statements that allowed it) for one call.

    `statements`: every statement of every identity policy of the caller."""
    context = context or {}
    allowed_by = []
    for statement in statements:
        effect = statement.get("Effect")
        if effect not in ("Allow", "Deny"):
            raise UnsupportedPolicy(f"Effect {effect!r}")
        if statement_applies(statement, action, resource, context):
            if effect == "Deny":
                return EXPLICIT_DENY, []
            allowed_by.append(statement)
    return (ALLOW, allowed_by) if allowed_by else (IMPLICIT_DENY, [])
