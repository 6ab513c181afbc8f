"""Tests of scripts/iam_policy.py (run by scripts/check-iam.py before it
evaluates anything; alone: python -m unittest scripts/test_iam_policy.py)."""

import unittest

from iam_policy import ALLOW, EXPLICIT_DENY, IMPLICIT_DENY, UnsupportedPolicy, evaluate, wildcard

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/records"
BUCKET = "arn:aws:s3:::offload"


def allow(action, resource, **extra):
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def decision(statements, action, resource, context=None):
    return evaluate(statements, action, resource, context)[0]


class Evaluation(unittest.TestCase):
    def test_an_allow_allows_and_nothing_else_does(self):
        policy = [allow("dynamodb:GetItem", TABLE)]
        self.assertEqual(decision(policy, "dynamodb:GetItem", TABLE), ALLOW)
        self.assertEqual(decision(policy, "dynamodb:PutItem", TABLE), IMPLICIT_DENY)
        self.assertEqual(decision(policy, "dynamodb:GetItem", TABLE + "-other"), IMPLICIT_DENY)
        self.assertEqual(decision([], "dynamodb:GetItem", TABLE), IMPLICIT_DENY)

    def test_an_explicit_deny_wins_over_any_allow(self):
        policy = [
            allow("dynamodb:*", "*"),
            {"Effect": "Deny", "Action": "dynamodb:DeleteItem", "Resource": TABLE},
            allow("dynamodb:DeleteItem", TABLE),
        ]
        self.assertEqual(decision(policy, "dynamodb:DeleteItem", TABLE), EXPLICIT_DENY)
        self.assertEqual(decision(policy, "dynamodb:GetItem", TABLE), ALLOW)

    def test_wildcards_in_actions_ignore_case_in_resources_do_not(self):
        policy = [allow(["dynamodb:*Item", "s3:Get?bject"], [TABLE, f"{BUCKET}/orders-api/*"])]
        self.assertEqual(decision(policy, "dynamodb:UpdateItem", TABLE), ALLOW)
        self.assertEqual(decision(policy, "DynamoDB:updateitem", TABLE), ALLOW)
        self.assertEqual(decision(policy, "dynamodb:Query", TABLE), IMPLICIT_DENY)
        self.assertEqual(decision(policy, "s3:GetObject", f"{BUCKET}/orders-api/a/b"), ALLOW)
        self.assertEqual(decision(policy, "s3:GetObject", f"{BUCKET}/order-events/a"), IMPLICIT_DENY)
        self.assertEqual(decision(policy, "s3:GetObject", f"{BUCKET}/ORDERS-API/a"), IMPLICIT_DENY)
        # A dot in a resource is a dot, not "any character".
        self.assertEqual(decision([allow("s3:GetObject", "arn:aws:s3:::a.b/*")], "s3:GetObject", "arn:aws:s3:::axb/k"), IMPLICIT_DENY)

    def test_not_action_and_not_resource(self):
        policy = [{"Effect": "Allow", "NotAction": "dynamodb:Delete*", "Resource": TABLE}]
        self.assertEqual(decision(policy, "dynamodb:GetItem", TABLE), ALLOW)
        self.assertEqual(decision(policy, "dynamodb:DeleteItem", TABLE), IMPLICIT_DENY)
        policy = [{"Effect": "Allow", "Action": "s3:GetObject", "NotResource": f"{BUCKET}/secret/*"}]
        self.assertEqual(decision(policy, "s3:GetObject", f"{BUCKET}/public/k"), ALLOW)
        self.assertEqual(decision(policy, "s3:GetObject", f"{BUCKET}/secret/k"), IMPLICIT_DENY)
        deny_all_but = [allow("*", "*"), {"Effect": "Deny", "NotAction": "dynamodb:GetItem", "Resource": "*"}]
        self.assertEqual(decision(deny_all_but, "dynamodb:GetItem", TABLE), ALLOW)
        self.assertEqual(decision(deny_all_but, "dynamodb:PutItem", TABLE), EXPLICIT_DENY)

    def test_for_all_values_string_like_on_leading_keys(self):
        policy = [
            allow(
                "dynamodb:PutItem",
                TABLE,
                Condition={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["~sweeper/stream/*"]}},
            )
        ]
        ok = {"dynamodb:LeadingKeys": ["~sweeper/stream/shard-1"]}
        self.assertEqual(decision(policy, "dynamodb:PutItem", TABLE, ok), ALLOW)
        record = {"dynamodb:LeadingKeys": ["5f3a" * 16]}
        self.assertEqual(decision(policy, "dynamodb:PutItem", TABLE, record), IMPLICIT_DENY)
        mixed = {"dynamodb:LeadingKeys": ["~sweeper/stream/a", "5f3a"]}
        self.assertEqual(decision(policy, "dynamodb:PutItem", TABLE, mixed), IMPLICIT_DENY)

    def test_for_any_value_and_plain_string_operators(self):
        policy = [allow("dynamodb:GetItem", TABLE, Condition={"ForAnyValue:StringEquals": {"dynamodb:Attributes": ["id"]}})]
        self.assertEqual(decision(policy, "dynamodb:GetItem", TABLE, {"dynamodb:Attributes": ["x", "id"]}), ALLOW)
        self.assertEqual(decision(policy, "dynamodb:GetItem", TABLE, {"dynamodb:Attributes": ["x"]}), IMPLICIT_DENY)
        policy = [allow("s3:GetObject", "*", Condition={"StringNotLike": {"s3:prefix": "tmp/*"}})]
        self.assertEqual(decision(policy, "s3:GetObject", BUCKET, {"s3:prefix": "orders/1"}), ALLOW)
        self.assertEqual(decision(policy, "s3:GetObject", BUCKET, {"s3:prefix": "tmp/1"}), IMPLICIT_DENY)

    def test_a_deny_on_a_condition_applies_only_when_it_holds(self):
        policy = [
            allow("s3:*", "*"),
            {"Effect": "Deny", "Action": "s3:*", "Resource": "*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        ]
        self.assertEqual(decision(policy, "s3:GetObject", BUCKET, {"aws:SecureTransport": "true"}), ALLOW)
        self.assertEqual(decision(policy, "s3:GetObject", BUCKET, {"aws:SecureTransport": "false"}), EXPLICIT_DENY)

    def test_what_it_cannot_decide_fails_loudly(self):
        numeric = [allow("dynamodb:GetItem", TABLE, Condition={"NumericLessThan": {"aws:EpochTime": "1"}})]
        with self.assertRaises(UnsupportedPolicy):
            evaluate(numeric, "dynamodb:GetItem", TABLE, {"aws:EpochTime": "0"})
        if_exists = [allow("dynamodb:GetItem", TABLE, Condition={"StringLikeIfExists": {"dynamodb:LeadingKeys": "a"}})]
        with self.assertRaises(UnsupportedPolicy):
            evaluate(if_exists, "dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ["a"]})
        leading = [allow("dynamodb:PutItem", TABLE, Condition={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": "a*"}})]
        with self.assertRaises(UnsupportedPolicy):  # the call carries no such key
            evaluate(leading, "dynamodb:PutItem", TABLE, {})
        with self.assertRaises(UnsupportedPolicy):  # a set qualifier on one value
            evaluate(leading, "dynamodb:PutItem", TABLE, {"dynamodb:LeadingKeys": "a"})
        with self.assertRaises(UnsupportedPolicy):
            evaluate([{"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"}], "s3:GetObject", BUCKET)
        # A condition on a statement that does not match is never looked at.
        self.assertEqual(decision(numeric, "dynamodb:PutItem", TABLE), IMPLICIT_DENY)

    def test_wildcard(self):
        self.assertTrue(wildcard("a*c", "abbbc"))
        self.assertTrue(wildcard("a?c", "abc"))
        self.assertFalse(wildcard("a?c", "abbc"))
        self.assertTrue(wildcard("*", ""))


if __name__ == "__main__":
    unittest.main()
