"""The deploy rehearsal of `make deploy-check` (scripts/deploy-check.sh runs it
inside scripts/s3-local.sh, which started moto on 127.0.0.1 for the run).

For each template built by `sam build` (into $DEPLOY_CHECK_WORK/build/<name>):
`sam package` to the emulator's S3; for template.yaml also a plain `sam deploy`
of the SAM template, as a user runs it, to show what the emulator makes of it
(moto runs no SAM transform: it skips every AWS::Serverless::* resource and
still says CREATE_COMPLETE); then the packaged template transformed locally
with SAM's own translator (as CloudFormation would on the server) and deployed
with `sam deploy`, which creates and executes a change set through
CloudFormation's API. Every resource the transformed template declares (its
conditions evaluated) is then read back from the emulator's own service APIs
(DynamoDB, SQS, Lambda, IAM, S3, EC2, RDS, ...) and compared with the
template's properties, resolved against the stack. A resource type moto's
CloudFormation skips is reported as SKIPPED, in the output and, checked here,
in deploy/README.md. template.yaml is then updated with changed parameters
(an update that must replace neither table and must reach the functions) and
deleted (tables with DeletionPolicy Retain must stay, the rest must go).

Usage (from scripts/deploy-check.sh):
    python scripts/deploy-check/rehearse.py template.yaml deploy/valkey.yaml deploy/postgres.yaml
"""

import ast
import hashlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import boto3
from botocore.exceptions import ClientError
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).resolve().parent.parent.parent
WORK = Path(os.environ["DEPLOY_CHECK_WORK"])
TIMINGS = Path(os.environ["DEPLOY_CHECK_TIMINGS"])
ARTIFACTS = Path(os.environ["DEPLOY_CHECK_ARTIFACTS"])
MOTO_LOG = Path(os.environ["S3_LOCAL_LOG"])
REGION = "us-east-1"
BUCKET = "deploy-check-artifacts"

# check-template.py's transform helpers (no AWS managed policy lookups; the
# check that every intrinsic stands alone after the transform).
_spec = importlib.util.spec_from_file_location("check_template", ROOT / "scripts" / "check-template.py")
check_template = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_template)

# moto refuses a TemplateURL on 127.0.0.1: it takes the first label of a
# host name for the bucket unless the URL says "localhost" (see
# deploy/README.md). localhost is the same loopback server.
_port = os.environ["AWS_ENDPOINT_URL_S3"].rsplit(":", 1)[1]
ENDPOINT = f"http://localhost:{_port}"
for var in list(os.environ):
    if var.startswith("AWS_ENDPOINT_URL"):
        del os.environ[var]
os.environ.update(
    {
        "AWS_ENDPOINT_URL": ENDPOINT,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "deploy-check",
        "AWS_SECRET_ACCESS_KEY": "deploy-check",
        # Nothing of the user's own AWS set-up (profiles, samconfig) leaks in.
        "AWS_CONFIG_FILE": str(WORK / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(WORK / "aws-credentials"),
        "SAM_CLI_TELEMETRY": "0",
    }
)
for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(var, None)

_clients = {}


def aws(service):
    if service not in _clients:
        _clients[service] = boto3.client(service, region_name=REGION, endpoint_url=ENDPOINT)
    return _clients[service]


def say(*parts):
    print("deploy-check:", *parts, file=sys.stderr, flush=True)


def timing(phase, what, seconds):
    with TIMINGS.open("a") as f:
        f.write(f"{phase}\t{what}\t{seconds:.0f}\n")


class Unresolvable(Exception):
    """A value that depends on a resource the emulator did not create."""


NO_VALUE = object()


def moto_log_mark():
    return MOTO_LOG.stat().st_size if MOTO_LOG.exists() else 0


def moto_errors_since(mark):
    """The last line of each traceback moto logged since mark."""
    with MOTO_LOG.open("rb") as f:
        f.seek(mark)
        text = f.read().decode("utf-8", "replace")
    return re.findall(r"^(\w+(?:Error|Exception): .*)$", text, re.M)


# Templates whose stack moto cannot create at all, with the error that stops
# it (deploy/README.md). Any other outcome fails the check: a different error
# is news (a template bug, or a moto that does more), and so is success.
KNOWN_DEPLOY_FAILURES = {
    # ElastiCache Serverless has no CloudFormation model in moto: skipped, and
    # the functions' Fn::GetAtt Cache.Endpoint.Address then has nothing to read.
    "deploy/valkey.yaml": r"Template error: instance of Fn::GetAtt references undefined resource Cache",
    # AWS::RDS::DBCluster has no model: skipped; the writer (AWS::RDS::DBInstance)
    # then has no cluster and moto's RDS fails on the Aurora engine with a 500,
    # which SAM CLI cannot parse (ResponseParserError).
    "deploy/postgres.yaml": r"KeyError: 'aurora-postgresql'",
}


def moto_skipped_since(mark):
    """The resource types moto's CloudFormation said it skipped since mark."""
    with MOTO_LOG.open("rb") as f:
        f.seek(mark)
        text = f.read().decode("utf-8", "replace")
    return sorted(set(re.findall(r"No Moto CloudFormation support for (\S+)", text)))


def run(cmd, log_name):
    """Run a SAM CLI command in the work directory (no samconfig.toml there)."""
    log = WORK / f"{log_name}.log"
    with log.open("w") as out:
        rc = subprocess.call(cmd, cwd=WORK, stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text()
    return rc, text


# --- the template, as CloudFormation would evaluate it -----------------------


class Stack:
    def __init__(self, name, template, params):
        self.name = name
        self.template = template
        self.params = {}
        for key, decl in template.get("Parameters", {}).items():
            value = params.get(key, decl.get("Default"))
            if value is None:
                raise SystemExit(f"{name}: parameter {key} has no value")
            value = str(value)
            if decl["Type"].startswith("List<") or decl["Type"] == "CommaDelimitedList":
                value = value.split(",")
            self.params[key] = value
        self.conditions = {}
        for cname in template.get("Conditions", {}):
            self.condition(cname)
        self.physical = {}
        self.types = {}
        self.listed = set()

    def condition(self, cname):
        if cname not in self.conditions:
            self.conditions[cname] = bool(self.resolve(self.template["Conditions"][cname]))
        return self.conditions[cname]

    def active(self):
        """The declared resources that exist with these parameters."""
        return {
            lid: r
            for lid, r in self.template["Resources"].items()
            if "Condition" not in r or self.condition(r["Condition"])
        }

    def load(self):
        for r in aws("cloudformation").list_stack_resources(StackName=self.name)["StackResourceSummaries"]:
            if r.get("LogicalResourceId"):
                self.physical[r["LogicalResourceId"]] = r.get("PhysicalResourceId")
                self.listed.add(r["LogicalResourceId"])
                self.types[r["LogicalResourceId"]] = r.get("ResourceStatus")

    def ref(self, name):
        pseudo = {
            "AWS::Region": REGION,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.name,
            "AWS::AccountId": ACCOUNT,
        }
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in pseudo:
            return pseudo[name]
        if name in self.params:
            return self.params[name]
        if self.physical.get(name):
            return self.physical[name]
        raise Unresolvable(name)

    def get_att(self, lid, attr):
        if not self.physical.get(lid):
            raise Unresolvable(lid)
        kind, pid = self.template["Resources"][lid]["Type"], self.physical[lid]
        try:
            if kind == "AWS::DynamoDB::Table":
                t = aws("dynamodb").describe_table(TableName=pid)["Table"]
                return {"Arn": t["TableArn"], "StreamArn": t.get("LatestStreamArn")}[attr]
            if kind == "AWS::SQS::Queue":
                a = aws("sqs").get_queue_attributes(QueueUrl=pid, AttributeNames=["QueueArn"])["Attributes"]
                return {"Arn": a["QueueArn"], "QueueName": a["QueueArn"].split(":")[-1], "QueueUrl": pid}[attr]
            if kind == "AWS::IAM::Role":
                role = aws("iam").get_role(RoleName=pid)["Role"]
                return {"Arn": role["Arn"], "RoleId": role["RoleId"]}[attr]
            if kind == "AWS::Lambda::Function":
                return {"Arn": aws("lambda").get_function_configuration(FunctionName=pid)["FunctionArn"]}[attr]
            if kind == "AWS::S3::Bucket":
                return {"Arn": f"arn:aws:s3:::{pid}", "DomainName": f"{pid}.s3.amazonaws.com"}[attr]
            if kind == "AWS::SNS::Topic":
                return {"TopicArn": pid, "TopicName": pid.split(":")[-1]}[attr]
            if kind == "AWS::EC2::SecurityGroup":
                return {"GroupId": pid}[attr]
        except KeyError:
            pass
        raise Unresolvable(f"{lid}.{attr}")

    def resolve(self, node):
        if isinstance(node, list):
            out = [self.resolve(n) for n in node]
            return [n for n in out if n is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Condition":
                return self.condition(arg)
            if key == "Fn::If":
                return self.resolve(arg[1] if self.condition(arg[0]) else arg[2])
            if key == "Fn::Equals":
                a, b = (self.resolve(x) for x in arg)
                return str(a) == str(b)
            if key == "Fn::Not":
                return not self.resolve(arg[0])
            if key == "Fn::And":
                return all(self.resolve(x) for x in arg)
            if key == "Fn::Or":
                return any(self.resolve(x) for x in arg)
            if key == "Fn::Join":
                return str(arg[0]).join(str(x) for x in self.resolve(arg[1]))
            if key == "Fn::Select":
                return self.resolve(arg[1])[int(self.resolve(arg[0]))]
            if key == "Fn::Split":
                return str(self.resolve(arg[1])).split(arg[0])
            if key == "Fn::GetAtt":
                lid, attr = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(lid, attr)
            if key == "Fn::Sub":
                text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

                def sub(m):
                    name = m.group(1)
                    if name in variables:
                        return str(variables[name])
                    if "." in name and not name.startswith("AWS::"):
                        return str(self.get_att(*name.split(".", 1)))
                    value = self.ref(name)
                    return ",".join(value) if isinstance(value, list) else str(value)

                return re.sub(r"\$\{([^}!]+)\}", sub, text)
        out = {k: self.resolve(v) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}


# --- reading each resource back from the emulator ----------------------------


def norm(value):
    """Canonical form for comparing policy documents and the like: scalars as
    strings, a one-element Action/Resource list as its element."""
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items() if k != "Version"}
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def policy_doc(doc):
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError:
            # moto answers GetRolePolicy, for a role CloudFormation created,
            # with the Python repr of the document (deploy/README.md).
            doc = ast.literal_eval(doc)
    statements = doc.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    out = []
    for st in statements:
        st = dict(st)
        for key in ("Action", "Resource", "NotAction", "NotResource"):
            if isinstance(st.get(key), str):
                st[key] = [st[key]]
        out.append(norm(st))
    return out


# Properties moto's CloudFormation accepts and silently drops (moto 5.2.1):
# the resource exists, this setting does not. A mismatch on one of these is
# reported as the emulator's gap, never passed as checked; each is listed in
# deploy/README.md ("Deploy rehearsal"). (type, check name prefix) -> what.
EMULATOR_GAPS = {
    ("AWS::DynamoDB::Table", "TTL"): "TimeToLiveSpecification is ignored (TTL stays DISABLED)",
    ("AWS::DynamoDB::Table", "point-in-time recovery"): "PointInTimeRecoverySpecification is ignored",
    ("AWS::Lambda::Function", "Architectures"): "Architectures is ignored (every function is x86_64)",
    ("AWS::IAM::Role", "managed policies"): "ManagedPolicyArns is ignored (no policy attached)",
    ("AWS::S3::Bucket", "lifecycle"): "LifecycleConfiguration is ignored (no lifecycle rules)",
    ("AWS::S3::Bucket", "object ownership"): "OwnershipControls is ignored",
    ("AWS::S3::Bucket", "public access block"): "PublicAccessBlockConfiguration is ignored",
    ("AWS::EC2::SecurityGroup", "SecurityGroupEgress"): "inline SecurityGroupEgress is ignored (the default allow-all egress stays)",
}


class Checks:
    def __init__(self, lid, kind):
        self.lid = lid
        self.kind = kind
        self.ok = []
        self.failed = []
        self.unchecked = []
        self.gaps = []

    def expect(self, what, expected, actual):
        if norm(expected) == norm(actual):
            self.ok.append(what)
            return
        gap = next((g for (k, prefix), g in EMULATOR_GAPS.items() if k == self.kind and what.startswith(prefix)), None)
        if gap:
            self.gaps.append(gap)
        else:
            self.failed.append(f"{what}: template says {expected!r}, the emulator has {actual!r}")

    def prop(self, stack, props, key, what, actual_fn):
        """Compare one declared property, resolved against the stack."""
        if key not in props:
            return
        try:
            expected = stack.resolve(props[key])
        except Unresolvable as e:
            self.unchecked.append(f"{what}: refers to {e}, which the emulator did not create")
            return
        self.expect(what, expected, actual_fn())


def check_table(stack, lid, props, pid, c):
    t = aws("dynamodb").describe_table(TableName=pid)["Table"]
    c.prop(stack, props, "KeySchema", "key schema", lambda: t["KeySchema"])
    if "AttributeDefinitions" in props:
        by_name = lambda defs: sorted(defs, key=lambda a: a["AttributeName"])  # noqa: E731
        c.expect("attributes", by_name(stack.resolve(props["AttributeDefinitions"])), by_name(t["AttributeDefinitions"]))
    c.prop(stack, props, "BillingMode", "billing mode", lambda: t.get("BillingModeSummary", {}).get("BillingMode"))
    if "StreamSpecification" in props:
        spec = t.get("StreamSpecification", {})
        c.expect("stream enabled", True, spec.get("StreamEnabled"))
        c.expect("stream view type", stack.resolve(props["StreamSpecification"]["StreamViewType"]), spec.get("StreamViewType"))
        c.expect("stream ARN", True, bool(t.get("LatestStreamArn")))
    if "GlobalSecondaryIndexes" in props:
        declared = stack.resolve(props["GlobalSecondaryIndexes"])
        actual = {g["IndexName"]: g for g in t.get("GlobalSecondaryIndexes", [])}
        for gsi in declared:
            have = actual.get(gsi["IndexName"], {})
            c.expect(f"index {gsi['IndexName']} keys", gsi["KeySchema"], have.get("KeySchema"))
            proj = dict(gsi["Projection"])
            got = dict(have.get("Projection", {}))
            if "NonKeyAttributes" in proj:
                proj["NonKeyAttributes"] = sorted(proj["NonKeyAttributes"])
                got["NonKeyAttributes"] = sorted(got.get("NonKeyAttributes", []))
            c.expect(f"index {gsi['IndexName']} projection", proj, got)
    if "TimeToLiveSpecification" in props:
        spec = stack.resolve(props["TimeToLiveSpecification"])
        ttl = aws("dynamodb").describe_time_to_live(TableName=pid)["TimeToLiveDescription"]
        c.expect("TTL attribute", spec["AttributeName"], ttl.get("AttributeName"))
        c.expect("TTL status", "ENABLED" if spec.get("Enabled") else "DISABLED", ttl.get("TimeToLiveStatus"))
    if "PointInTimeRecoverySpecification" in props:
        want = stack.resolve(props["PointInTimeRecoverySpecification"]).get("PointInTimeRecoveryEnabled")
        pitr = aws("dynamodb").describe_continuous_backups(TableName=pid)["ContinuousBackupsDescription"]
        status = pitr.get("PointInTimeRecoveryDescription", {}).get("PointInTimeRecoveryStatus")
        c.expect("point-in-time recovery", "ENABLED" if want else "DISABLED", status)


def check_queue(stack, lid, props, pid, c):
    a = aws("sqs").get_queue_attributes(QueueUrl=pid, AttributeNames=["All"])["Attributes"]
    c.prop(stack, props, "MessageRetentionPeriod", "message retention", lambda: a.get("MessageRetentionPeriod"))
    c.prop(stack, props, "VisibilityTimeout", "visibility timeout", lambda: a.get("VisibilityTimeout"))
    c.prop(stack, props, "SqsManagedSseEnabled", "SQS-managed encryption", lambda: a.get("SqsManagedSseEnabled"))
    if "RedrivePolicy" in props:
        want = stack.resolve(props["RedrivePolicy"])
        got = json.loads(a.get("RedrivePolicy", "{}"))
        c.expect("redrive: dead-letter queue", want["deadLetterTargetArn"], got.get("deadLetterTargetArn"))
        c.expect("redrive: max receive count", want["maxReceiveCount"], got.get("maxReceiveCount"))


def check_function(stack, lid, props, pid, c):
    cfg = aws("lambda").get_function_configuration(FunctionName=pid)
    for key in ("Runtime", "Handler", "MemorySize", "Timeout", "Architectures", "Description"):
        c.prop(stack, props, key, key, lambda key=key: cfg.get(key))
    c.prop(stack, props, "Role", "role", lambda: cfg.get("Role"))
    if "Environment" in props:
        declared = props["Environment"].get("Variables", {})
        actual = cfg.get("Environment", {}).get("Variables", {})
        for var, node in declared.items():
            try:
                value = stack.resolve(node)
            except Unresolvable as e:
                c.unchecked.append(f"env {var}: refers to {e}, which the emulator did not create (emulator has {actual.get(var)!r})")
                continue
            if value is NO_VALUE:
                c.expect(f"env {var} not set", None, actual.get(var))
            else:
                c.expect(f"env {var}", value, actual.get(var))
        extra = sorted(set(actual) - set(declared))
        c.expect("no undeclared env variables", [], extra)
    if "VpcConfig" in props:
        vpc = stack.resolve(props["VpcConfig"])
        got = cfg.get("VpcConfig", {})
        c.expect("VPC subnets", sorted(vpc["SubnetIds"]), sorted(got.get("SubnetIds", [])))
        c.expect("VPC security groups", sorted(vpc["SecurityGroupIds"]), sorted(got.get("SecurityGroupIds", [])))
    # The code is the built bootstrap, zipped by `sam package`.
    code = stack.resolve(props["Code"])
    blob = aws("s3").get_object(Bucket=code["S3Bucket"], Key=code["S3Key"])["Body"].read()
    c.expect("code size", len(blob), cfg.get("CodeSize"))
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        names = z.namelist()
        info = z.getinfo("bootstrap") if "bootstrap" in names else None
        c.expect("package holds bootstrap", True, info is not None)
        if info is not None:
            c.expect("bootstrap is executable", True, bool((info.external_attr >> 16) & 0o111))
            digest = hashlib.sha256(z.read("bootstrap")).hexdigest()[:16]
            c.expect("bootstrap is the built artifact", BUILT.get(lid), digest)


def check_role(stack, lid, props, pid, c):
    iam = aws("iam")
    role = iam.get_role(RoleName=pid)["Role"]
    if "AssumeRolePolicyDocument" in props:
        c.expect("trust policy", policy_doc(stack.resolve(props["AssumeRolePolicyDocument"])),
                 policy_doc(role["AssumeRolePolicyDocument"]))
    declared = {}
    try:
        declared = {p["PolicyName"]: policy_doc(p["PolicyDocument"]) for p in stack.resolve(props.get("Policies", []))}
    except Unresolvable as e:
        c.unchecked.append(f"inline policies: refer to {e}, which the emulator did not create")
        declared = None
    names = iam.list_role_policies(RoleName=pid)["PolicyNames"]
    if declared is not None:
        c.expect("inline policy names", sorted(declared), sorted(names))
        for name, doc in declared.items():
            if name in names:
                got = iam.get_role_policy(RoleName=pid, PolicyName=name)["PolicyDocument"]
                c.expect(f"policy {name} statements", doc, policy_doc(got))
    attached = sorted(p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName=pid)["AttachedPolicies"])
    try:
        c.expect("managed policies", sorted(stack.resolve(props.get("ManagedPolicyArns", []))), attached)
    except Unresolvable as e:
        c.unchecked.append(f"managed policies: refer to {e}, which the emulator did not create")


def check_managed_policy(stack, lid, props, pid, c):
    iam = aws("iam")
    policy = iam.get_policy(PolicyArn=pid)["Policy"]
    version = iam.get_policy_version(PolicyArn=pid, VersionId=policy["DefaultVersionId"])["PolicyVersion"]
    c.expect("statements", policy_doc(stack.resolve(props["PolicyDocument"])), policy_doc(version["Document"]))
    entities = iam.list_entities_for_policy(PolicyArn=pid)
    c.prop(stack, props, "Roles", "attached roles",
           lambda: sorted(r["RoleName"] for r in entities.get("PolicyRoles", [])))


def check_bucket(stack, lid, props, pid, c):
    s3 = aws("s3")
    if "LifecycleConfiguration" in props:
        want = {r["Id"]: r for r in stack.resolve(props["LifecycleConfiguration"])["Rules"]}
        try:
            got = {r.get("ID"): r for r in s3.get_bucket_lifecycle_configuration(Bucket=pid)["Rules"]}
        except ClientError as e:
            got = {}
            c.expect("lifecycle configuration", "present", f"none ({e.response['Error']['Code']})")
        c.expect("lifecycle rule ids", sorted(want), sorted(got))
        for rid, rule in want.items():
            have = got.get(rid, {})
            prefix = have.get("Prefix", have.get("Filter", {}).get("Prefix"))
            c.expect(f"lifecycle {rid}: status", rule.get("Status"), have.get("Status"))
            c.expect(f"lifecycle {rid}: prefix", rule.get("Prefix"), prefix)
            c.expect(f"lifecycle {rid}: expiration days", rule.get("ExpirationInDays"), have.get("Expiration", {}).get("Days"))
    if "BucketEncryption" in props:
        want = stack.resolve(props["BucketEncryption"])["ServerSideEncryptionConfiguration"]
        try:
            got = s3.get_bucket_encryption(Bucket=pid)["ServerSideEncryptionConfiguration"]["Rules"]
        except ClientError as e:
            got = []
        c.expect("encryption", [w["ServerSideEncryptionByDefault"]["SSEAlgorithm"] for w in want],
                 [g["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] for g in got])
    if "PublicAccessBlockConfiguration" in props:
        try:
            got = s3.get_public_access_block(Bucket=pid)["PublicAccessBlockConfiguration"]
        except ClientError as e:
            got = f"none ({e.response['Error']['Code']})"
        c.expect("public access block", stack.resolve(props["PublicAccessBlockConfiguration"]), got)
    if "OwnershipControls" in props:
        try:
            got = s3.get_bucket_ownership_controls(Bucket=pid)["OwnershipControls"]["Rules"]
        except ClientError as e:
            got = f"none ({e.response['Error']['Code']})"
        c.expect("object ownership", stack.resolve(props["OwnershipControls"])["Rules"], got)


def check_event_source_mapping(stack, lid, props, pid, c):
    m = aws("lambda").get_event_source_mapping(UUID=pid)
    c.prop(stack, props, "EventSourceArn", "event source", lambda: m.get("EventSourceArn"))
    c.prop(stack, props, "BatchSize", "batch size", lambda: m.get("BatchSize"))
    c.prop(stack, props, "FunctionResponseTypes", "response types", lambda: m.get("FunctionResponseTypes"))
    c.prop(stack, props, "FunctionName", "function", lambda: m.get("FunctionArn", "").split(":")[-1])


def check_permission(stack, lid, props, pid, c):
    function = stack.resolve(props["FunctionName"])
    policy = json.loads(aws("lambda").get_policy(FunctionName=function)["Policy"])
    want_principal = stack.resolve(props["Principal"])
    found = [
        st for st in policy["Statement"]
        if st.get("Action") == stack.resolve(props["Action"])
        and want_principal in json.dumps(st.get("Principal"))
    ]
    c.expect(f"{props['Action']} for {want_principal} on {function}", True, bool(found))
    if "SourceArn" in props:
        try:
            arn = stack.resolve(props["SourceArn"])
            c.expect("source ARN", True, any(arn in json.dumps(st.get("Condition", {})) for st in found))
        except Unresolvable as e:
            c.unchecked.append(f"source ARN: refers to {e}, which the emulator did not create")


def check_security_group(stack, lid, props, pid, c):
    g = aws("ec2").describe_security_groups(GroupIds=[pid])["SecurityGroups"][0]
    c.prop(stack, props, "VpcId", "VPC", lambda: g.get("VpcId"))
    c.prop(stack, props, "GroupDescription", "description", lambda: g.get("Description"))
    for key, have_key in (("SecurityGroupIngress", "IpPermissions"), ("SecurityGroupEgress", "IpPermissionsEgress")):
        for rule in stack.resolve(props.get(key, [])):
            c.expect(f"{key} {rule.get('IpProtocol')} {rule.get('FromPort', '')}-{rule.get('ToPort', '')}", True,
                     rule_present(rule, g[have_key]))


def rule_present(rule, permissions):
    for p in permissions:
        if str(p.get("IpProtocol")) != str(rule.get("IpProtocol")):
            continue
        if "FromPort" in rule and (str(p.get("FromPort")) != str(rule["FromPort"]) or str(p.get("ToPort")) != str(rule["ToPort"])):
            continue
        peer = rule.get("CidrIp") or rule.get("SourceSecurityGroupId") or rule.get("DestinationSecurityGroupId")
        peers = [r.get("CidrIp") for r in p.get("IpRanges", [])] + [r.get("GroupId") for r in p.get("UserIdGroupPairs", [])]
        if peer in peers:
            return True
    return False


def check_sg_ingress(stack, lid, props, pid, c):
    try:
        rule = stack.resolve(props)
    except Unresolvable as e:
        c.unchecked.append(f"rule: refers to {e}, which the emulator did not create")
        return
    g = aws("ec2").describe_security_groups(GroupIds=[rule["GroupId"]])["SecurityGroups"][0]
    c.expect(f"ingress {rule['IpProtocol']} {rule.get('FromPort')} from {rule.get('SourceSecurityGroupId')}", True,
             rule_present(rule, g["IpPermissions"]))


def check_vpc_endpoint(stack, lid, props, pid, c):
    e = aws("ec2").describe_vpc_endpoints(VpcEndpointIds=[pid])["VpcEndpoints"][0]
    c.prop(stack, props, "VpcId", "VPC", lambda: e.get("VpcId"))
    c.prop(stack, props, "ServiceName", "service", lambda: e.get("ServiceName"))
    c.prop(stack, props, "VpcEndpointType", "type", lambda: e.get("VpcEndpointType"))
    if "RouteTableIds" in props:
        c.expect("route tables", sorted(stack.resolve(props["RouteTableIds"])), sorted(e.get("RouteTableIds", [])))
    if "SubnetIds" in props:
        c.expect("subnets", sorted(stack.resolve(props["SubnetIds"])), sorted(e.get("SubnetIds", [])))
    c.prop(stack, props, "PrivateDnsEnabled", "private DNS", lambda: e.get("PrivateDnsEnabled"))


def check_db_subnet_group(stack, lid, props, pid, c):
    g = aws("rds").describe_db_subnet_groups(DBSubnetGroupName=pid)["DBSubnetGroups"][0]
    c.expect("subnets", sorted(stack.resolve(props["SubnetIds"])), sorted(s["SubnetIdentifier"] for s in g["Subnets"]))


def check_db_instance(stack, lid, props, pid, c):
    i = aws("rds").describe_db_instances(DBInstanceIdentifier=pid)["DBInstances"][0]
    c.prop(stack, props, "Engine", "engine", lambda: i.get("Engine"))
    c.prop(stack, props, "DBInstanceClass", "class", lambda: i.get("DBInstanceClass"))
    c.prop(stack, props, "DBClusterIdentifier", "cluster", lambda: i.get("DBClusterIdentifier"))
    c.prop(stack, props, "PubliclyAccessible", "publicly accessible", lambda: i.get("PubliclyAccessible"))


def check_dashboard(stack, lid, props, pid, c):
    d = aws("cloudwatch").get_dashboard(DashboardName=pid)
    try:
        body = stack.resolve(props["DashboardBody"])
    except Unresolvable as e:
        c.unchecked.append(f"body: refers to {e}, which the emulator did not create")
        return
    c.expect("body", json.loads(body), json.loads(d["DashboardBody"]))


def check_topic(stack, lid, props, pid, c):
    a = aws("sns").get_topic_attributes(TopicArn=pid)["Attributes"]
    c.prop(stack, props, "TopicName", "name", lambda: a.get("TopicArn", "").split(":")[-1])
    c.expect("exists", pid, a.get("TopicArn"))


def check_log_group(stack, lid, props, pid, c):
    groups = aws("logs").describe_log_groups(logGroupNamePrefix=pid)["logGroups"]
    g = next((x for x in groups if x["logGroupName"] == pid), {})
    c.expect("exists", pid, g.get("logGroupName"))
    c.prop(stack, props, "RetentionInDays", "retention", lambda: g.get("retentionInDays"))


VERIFIERS = {
    "AWS::DynamoDB::Table": check_table,
    "AWS::SQS::Queue": check_queue,
    "AWS::Lambda::Function": check_function,
    "AWS::IAM::Role": check_role,
    "AWS::IAM::ManagedPolicy": check_managed_policy,
    "AWS::S3::Bucket": check_bucket,
    "AWS::Lambda::EventSourceMapping": check_event_source_mapping,
    "AWS::Lambda::Permission": check_permission,
    "AWS::EC2::SecurityGroup": check_security_group,
    "AWS::EC2::SecurityGroupIngress": check_sg_ingress,
    "AWS::EC2::VPCEndpoint": check_vpc_endpoint,
    "AWS::RDS::DBSubnetGroup": check_db_subnet_group,
    "AWS::RDS::DBInstance": check_db_instance,
    "AWS::CloudWatch::Dashboard": check_dashboard,
    "AWS::SNS::Topic": check_topic,
    "AWS::Logs::LogGroup": check_log_group,
}


def verify(stack, skipped_types):
    """Every declared resource: created and read back, or skipped by the
    emulator (reported). Returns rows (logical id, type, status, detail) and
    failures."""
    stack.load()
    rows, failures, unchecked = [], [], []
    for lid, resource in sorted(stack.active().items()):
        kind = resource["Type"]
        pid = stack.physical.get(lid)
        if lid not in stack.listed:
            status = "SKIPPED"
            why = "moto's CloudFormation has no model for it" if kind in skipped_types else "not created"
            rows.append((lid, kind, status, why))
            if kind not in skipped_types:
                failures.append(f"{stack.name} {lid} ({kind}): not created, and moto did not say it skipped it")
            continue
        verifier = VERIFIERS.get(kind)
        if verifier is None:
            rows.append((lid, kind, stack.types.get(lid), "FAIL: no read-back for this type in rehearse.py"))
            failures.append(f"{stack.name} {lid}: {kind} is created but rehearse.py cannot read it back (add a verifier)")
            continue
        c = Checks(lid, kind)
        try:
            verifier(stack, lid, resource.get("Properties", {}), pid, c)
        except (ClientError, KeyError, IndexError) as e:
            c.failed.append(f"read-back failed: {type(e).__name__}: {e}")
        failures += [f"{stack.name} {lid}: {f}" for f in c.failed]
        unchecked += [f"{stack.name} {lid}: {u}" for u in c.unchecked]
        for g in c.gaps:
            GAPS_SEEN.setdefault(f"{kind}: {g}", set()).add(f"{stack.name}/{lid}")
        detail = f"{len(c.ok)} properties as declared" + (f", {len(c.failed)} WRONG" if c.failed else "")
        if c.unchecked or c.gaps:
            detail += f", {len(c.unchecked) + len(c.gaps)} not checkable"
        rows.append((lid, kind, stack.types.get(lid), detail))
    return rows, failures, unchecked


# --- the steps ---------------------------------------------------------------


def sam_deploy(template_file, stack_name, params, log_name, phase, path):
    """`sam deploy` of `template_file` as `stack_name`, its time recorded as
    `phase` of `path`: its exit code and output, the mark of moto's log
    before it (for the errors moto logged meanwhile), the resource types moto
    skipped meanwhile, and the stack's status after it."""
    cmd = [
        "sam", "deploy", "--template-file", str(template_file), "--stack-name", stack_name,
        "--s3-bucket", BUCKET, "--capabilities", "CAPABILITY_IAM", "CAPABILITY_NAMED_IAM",
        "--no-confirm-changeset", "--no-fail-on-empty-changeset", "--no-progressbar", "--region", REGION,
    ]
    if params:
        cmd += ["--parameter-overrides", *[f"{k}={v}" for k, v in params.items()]]
    mark = moto_log_mark()
    t0 = time.time()
    rc, out = run(cmd, log_name)
    timing(phase, path, time.time() - t0)
    return rc, out, mark, moto_skipped_since(mark), stack_status(stack_name)


def stack_status(name):
    try:
        return aws("cloudformation").describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
    except ClientError as e:
        return f"none ({e.response['Error']['Message']})"


def stack_errors(name):
    try:
        events = aws("cloudformation").describe_stack_events(StackName=name)["StackEvents"]
    except ClientError:
        return []
    return [f"{e['LogicalResourceId']}: {e['ResourceStatus']} {e.get('ResourceStatusReason', '')}"
            for e in events if "FAILED" in e["ResourceStatus"]]


def planned(stack_name):
    """The resources of the stack's last change set: what CloudFormation
    was asked to create."""
    cf = aws("cloudformation")
    try:
        sets = cf.list_change_sets(StackName=stack_name)["Summaries"]
        if not sets:
            return []
        changes = cf.describe_change_set(StackName=stack_name, ChangeSetName=sets[-1]["ChangeSetId"])["Changes"]
    except ClientError:
        return []
    return sorted(
        (ch["ResourceChange"]["LogicalResourceId"], ch["ResourceChange"]["ResourceType"], "planned", "in the change set, not created")
        for ch in changes
    )


def references(node, names):
    """The resources of `names` that node refers to (Ref, Fn::GetAtt, Fn::Sub)."""
    found = set()
    if isinstance(node, list):
        for n in node:
            found |= references(n, names)
    elif isinstance(node, dict):
        for key, arg in node.items():
            if key == "Ref" and arg in names:
                found.add(arg)
            elif key == "Fn::GetAtt":
                lid = arg[0] if isinstance(arg, list) else arg.split(".", 1)[0]
                found.add(lid)
            elif key == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                found |= {m.split(".", 1)[0] for m in re.findall(r"\$\{([^}!]+)\}", text)} & names
                if not isinstance(arg, str):
                    found |= references(arg[1], names)
            else:
                found |= references(arg, names)
    return found


def without(template, cannot):
    """The template minus `cannot` and every resource that refers to one of
    them, directly or not (and the outputs that do). Returns the template
    and what was left out, by reason."""
    resources = template["Resources"]
    names = set(resources)
    removed = set(cannot)
    while True:
        more = {
            lid for lid, r in resources.items()
            if lid not in removed
            and (references(r, names) & removed or set(r.get("DependsOn", []) if isinstance(r.get("DependsOn"), list) else [r.get("DependsOn")]) & removed)
        }
        if not more:
            break
        removed |= more
    out = dict(template)
    out["Resources"] = {lid: r for lid, r in resources.items() if lid not in removed}
    out["Outputs"] = {k: v for k, v in template.get("Outputs", {}).items() if not references(v, names) & removed}
    return out, sorted(removed - set(cannot))


def network():
    """A VPC with two private subnets in two zones and their route table."""
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.42.{i}.0/24", AvailabilityZone=f"{REGION}{zone}")["Subnet"]["SubnetId"]
        for i, zone in enumerate("ab")
    ]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    for s in subnets:
        ec2.associate_route_table(RouteTableId=table, SubnetId=s)
    return {"VpcId": vpc, "SubnetIds": ",".join(subnets), "RouteTableIds": table}


def tables(stack):
    out = {}
    for lid, r in stack.template["Resources"].items():
        if r["Type"] == "AWS::DynamoDB::Table" and stack.physical.get(lid):
            t = aws("dynamodb").describe_table(TableName=stack.physical[lid])["Table"]
            out[lid] = (t["TableName"], t["TableArn"], str(t["CreationDateTime"]))
    return out


BUILT = {}
GAPS_SEEN = {}
ACCOUNT = ""


def self_test():
    """The template logic this check relies on, on a small template: a
    wrong answer here would pass or fail stacks for the wrong reason."""
    t = {
        "Parameters": {"P": {"Type": "String", "Default": "x"}, "L": {"Type": "CommaDelimitedList", "Default": "a,b"}},
        "Conditions": {"C": {"Fn::Equals": [{"Ref": "P"}, "x"]}, "N": {"Fn::Not": [{"Condition": "C"}]}},
        "Resources": {
            "A": {"Type": "T"},
            "B": {"Type": "T", "Properties": {"X": {"Fn::GetAtt": ["A", "Arn"]}}},
            "D": {"Type": "T", "Properties": {"Y": {"Fn::Sub": "${B}-z"}}},
            "E": {"Type": "T", "Condition": "C", "Properties": {"Z": {"Fn::Join": ["-", {"Ref": "L"}]}}},
            "F": {"Type": "T", "DependsOn": "D"},
            "G": {"Type": "T", "Condition": "N"},
        },
        "Outputs": {"O": {"Value": {"Ref": "D"}}, "Q": {"Value": "k"}},
    }
    out, dependent = without(t, ["A"])
    assert sorted(out["Resources"]) == ["E", "G"], out["Resources"]
    assert dependent == ["B", "D", "F"], dependent
    assert list(out["Outputs"]) == ["Q"], out["Outputs"]
    default, other = Stack("s", t, {}), Stack("s", t, {"P": "y", "L": "c"})
    assert sorted(default.active()) == ["A", "B", "D", "E", "F"] and sorted(other.active()) == ["A", "B", "D", "F", "G"]
    assert default.resolve(t["Resources"]["E"]["Properties"]) == {"Z": "a-b"}
    try:
        default.resolve(t["Resources"]["D"]["Properties"])
        raise AssertionError("a reference to a resource the emulator did not create must not resolve")
    except Unresolvable:
        pass
    assert policy_doc("{'Statement': [{'Effect': 'Allow', 'Action': 's3:GetObject', 'Resource': 'r'}]}") == [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["r"]}
    ]
    c = Checks("X", "AWS::Lambda::Function")
    c.expect("Architectures", ["arm64"], ["x86_64"])
    c.expect("Runtime", "provided.al2023", "python3.12")
    assert c.gaps and len(c.failed) == 1, (c.gaps, c.failed)


def main():
    global ACCOUNT
    self_test()
    templates = sys.argv[1:]
    ACCOUNT = aws("sts").get_caller_identity()["Account"]
    aws("s3").create_bucket(Bucket=BUCKET)
    artifacts = [line.split("\t") for line in ARTIFACTS.read_text().splitlines()]
    failures, notes, summaries = [], [], []
    all_skipped = set()

    for path in templates:
        name = Path(path).stem
        built = WORK / "build" / name / "template.yaml"
        BUILT.clear()
        BUILT.update({fn: digest for t, fn, _size, _glibc, digest in artifacts if t == path})

        # sam package: the built bootstraps, zipped, to the emulator's S3.
        packaged = WORK / f"{name}-packaged.yaml"
        t0 = time.time()
        rc, out = run(["sam", "package", "--template-file", str(built), "--s3-bucket", BUCKET,
                       "--output-template-file", str(packaged), "--region", REGION], f"package-{name}")
        if rc:
            sys.exit(f"deploy-check: sam package {path} failed:\n{out[-3000:]}")
        timing("package", path, time.time() - t0)

        params = {}
        if name != "template":
            params = network()
            params["CacheName" if name == "valkey" else "ProxyName"] = f"deploy-check-{name}"

        if name == "template":
            # As a user runs it: the SAM template itself, transformed (or not)
            # by the emulator's CloudFormation.
            rc, out, _, skipped, status = sam_deploy(
                built, "deploy-check-sam", params, "deploy-sam", "deploy (SAM template, as is)", path
            )
            serverless = [lid for lid, r in yaml_parse(built.read_text())["Resources"].items() if r["Type"].startswith("AWS::Serverless::")]
            functions = aws("lambda").list_functions()["Functions"]
            if rc == 0 and not functions:
                notes.append(
                    f"`sam deploy` of the SAM template: {status}, but moto ran no SAM transform: "
                    f"it skipped {', '.join(serverless)} (its log: "
                    + "; ".join(f"'No Moto CloudFormation support for {t}'" for t in skipped)
                    + "): no function, role, API or schedule exists. Deployed below as CloudFormation would transform it."
                )
                all_skipped.update(skipped)
            elif rc == 0:
                failures.append("moto now deploys the SAM template's functions itself: deploy it directly and update deploy/README.md")
            else:
                notes.append(f"`sam deploy` of the SAM template failed on the emulator: {out.strip().splitlines()[-1]}")
            aws("cloudformation").delete_stack(StackName="deploy-check-sam")

        # CloudFormation's own step, done here: the SAM transform.
        template = transform(yaml_parse(packaged.read_text()), {}, check_template.NoManagedPolicies())
        bad = check_template.malformed_intrinsics(template)
        if bad:
            failures.append(f"{path}: the transformed template has malformed intrinsics at {bad}")
        transformed = WORK / f"{name}-transformed.json"
        transformed.write_text(json.dumps(template, indent=1))

        stack_name = f"deploy-check-{name}"
        rc, out, mark, skipped, status = sam_deploy(transformed, stack_name, params, f"deploy-{name}", "deploy", path)
        all_skipped.update(skipped)
        stack = Stack(stack_name, template, params)
        if rc or status != "CREATE_COMPLETE":
            sam_error = next((line for line in reversed(out.splitlines()) if line.startswith("Error")), out.strip()[-300:])
            moto_errors = moto_errors_since(mark)
            evidence = "\n".join([sam_error, *moto_errors])
            known = KNOWN_DEPLOY_FAILURES.get(path)
            rows = planned(stack_name)
            if known and re.search(known, evidence):
                notes.append(
                    f"{path}: the emulator cannot create this stack ({status}). sam deploy: {sam_error!r}"
                    + (f"; moto's log: {moto_errors[-1]!r}" if moto_errors else "")
                    + f". What ran: sam package, the SAM transform, the change set ({len(rows)} resources planned)."
                )
                summaries.append((path, f"{status}: NOT DEPLOYABLE ON THE EMULATOR (known, deploy/README.md)", rows, skipped))
                # What does run: the same template without the resources the
                # emulator cannot create that others refer to, and without
                # everything that refers to those.
                names = set(template["Resources"])
                referenced = set().union(*(references(r, names) for r in template["Resources"].values()))
                cannot = sorted(
                    lid for lid, r in Stack(stack_name, template, params).active().items()
                    if r["Type"] in skipped and lid in referenced
                )
                if path == "deploy/postgres.yaml":
                    # The writer: an Aurora instance without its (skipped) cluster.
                    cannot.append("DatabaseWriter")
                partial, dependent = without(template, cannot)
                partial_file = WORK / f"{name}-partial.json"
                partial_file.write_text(json.dumps(partial, indent=1))
                partial_name = f"{stack_name}-partial"
                rc, out, mark, skipped_partial, status = sam_deploy(
                    partial_file, partial_name, params, f"deploy-{name}-partial", "deploy (partial)", path
                )
                all_skipped.update(skipped_partial)
                label = f"{path}, partial: without {', '.join(cannot)} (the emulator cannot create them) and {', '.join(dependent)} (they refer to those)"
                if rc or status != "CREATE_COMPLETE":
                    failures.append(f"{label}: sam deploy ended {status} (rc {rc}): {out.strip()[-500:]}; moto: {moto_errors_since(mark)}")
                    summaries.append((label, status, [], skipped_partial))
                    continue
                pstack = Stack(partial_name, partial, params)
                rows, bad, unchecked = verify(pstack, skipped_partial)
                failures += bad
                notes += unchecked
                summaries.append((label, status, rows, skipped_partial))
            else:
                failures.append(f"{path}: sam deploy ended {status} (rc {rc}): {sam_error}; moto: {moto_errors}; {stack_errors(stack_name)}")
                summaries.append((path, status, rows, skipped))
            continue
        if path in KNOWN_DEPLOY_FAILURES:
            failures.append(f"{path}: deployed on the emulator, which deploy/README.md says it cannot: update KNOWN_DEPLOY_FAILURES and the README")
        t0 = time.time()
        rows, bad, unchecked = verify(stack, skipped)
        timing("read back", path, time.time() - t0)
        failures += bad
        notes += unchecked
        summaries.append((path, status, rows, skipped))

        if name == "template":
            # A second deploy with changed parameters: an update, both tables
            # kept (same name, ARN and creation time), the new values live.
            before = tables(stack)
            changed = {"SweepGraceSeconds": "120", "IdempotencyExpiresAfterSeconds": "172800",
                       "OrdersApiOffloadExpirationDays": "2"}
            rc, out, _, _, status = sam_deploy(
                transformed, stack_name, changed, "deploy-template-update", "update", path
            )
            if rc or status != "UPDATE_COMPLETE":
                failures.append(f"{path}: the update ended {status} (rc {rc}): {stack_errors(stack_name)}")
            else:
                updated = Stack(stack_name, template, changed)
                rows2, bad, _ = verify(updated, skipped)
                failures += [f"after the update: {b}" for b in bad]
                after = tables(updated)
                for lid, identity in before.items():
                    if after.get(lid) != identity:
                        failures.append(f"{path}: the update replaced {lid}: {identity} -> {after.get(lid)}")
                notes.append(
                    f"update ({', '.join(f'{k}={v}' for k, v in changed.items())}): UPDATE_COMPLETE; "
                    + ", ".join(f"{lid} kept ({t[0]}, created {t[2]})" for lid, t in after.items() if before.get(lid) == t)
                    + f"; every resource read back again with the new values ({len(rows2)} resources)"
                )
            # Delete: retained tables stay, everything else goes.
            t0 = time.time()
            aws("cloudformation").delete_stack(StackName=stack_name)
            gone_status = stack_status(stack_name)
            kept = {lid for lid, r in template["Resources"].items() if r.get("DeletionPolicy") == "Retain"}
            for lid, (tname, _arn, _created) in before.items():
                try:
                    aws("dynamodb").describe_table(TableName=tname)
                    exists = True
                except ClientError:
                    exists = False
                if exists != (lid in kept):
                    failures.append(f"{path}: after the stack's delete {lid} {'still exists' if exists else 'is gone'}"
                                    f" (DeletionPolicy {template['Resources'][lid].get('DeletionPolicy', 'Delete')})")
            left = [f["FunctionName"] for f in aws("lambda").list_functions()["Functions"] if f["FunctionName"].startswith(stack_name)]
            if left:
                failures.append(f"{path}: functions left after the stack's delete: {left}")
            notes.append(f"delete: stack {gone_status}; kept as declared (DeletionPolicy Retain): {', '.join(sorted(kept & set(before)))}; "
                         "its functions are gone")
            timing("delete", path, time.time() - t0)

    # The emulator's gaps are written down where users read them.
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme.split("## Deploy rehearsal", 1)[1] if "## Deploy rehearsal" in readme else ""
    undocumented = sorted(t for t in all_skipped if f"`{t}`" not in section)
    if undocumented:
        failures.append("deploy/README.md's \"Deploy rehearsal\" section does not list these resource types "
                        f"the emulator skipped: {', '.join(undocumented)}")

    report(summaries, notes, failures, all_skipped)
    if failures:
        sys.exit(f"deploy-check: {len(failures)} failure(s)")


def report(summaries, notes, failures, all_skipped):
    p = print
    p("\n==== deploy-check summary ====")
    p("\nArtifacts (sam build: release, arm64, cargo-lambda + zig):")
    for t, fn, size, glibc, digest in (line.split("\t") for line in ARTIFACTS.read_text().splitlines()):
        p(f"  {t:22} {fn:22} {int(size) / 1e6:6.1f} MB  aarch64 ELF, needs GLIBC_{glibc} (<= 2.34)  sha256 {digest}")
    for path, status, rows, skipped in summaries:
        p(f"\nStack from {path}: {status}")
        for lid, kind, st, detail in rows:
            p(f"  {lid:44} {kind:34} {st or '':16} {detail}")
    if all_skipped:
        p("\nResource types moto's CloudFormation skipped (not created, stack still CREATE_COMPLETE; see deploy/README.md):")
        p("  " + ", ".join(sorted(all_skipped)))
    if GAPS_SEEN:
        p("\nDeclared properties the emulator dropped (not checkable; deploy/README.md):")
        for gap, where in sorted(GAPS_SEEN.items()):
            p(f"  - {gap}: {', '.join(sorted(where))}")
    if notes:
        p("\nNotes:")
        for n in notes:
            p(f"  - {n}")
    p("\nTimings:")
    for phase, what, secs in (line.split("\t") for line in TIMINGS.read_text().splitlines()):
        p(f"  {phase:30} {what:22} {secs:>5} s")
    if failures:
        p("\nFAILURES:")
        for f in failures:
            p(f"  - {f}")
    else:
        p("\ndeploy-check: passed: template.yaml deployed, read back, updated and deleted as declared; the deploy/"
          " templates as far as the emulator goes (above); every resource the emulator created is as declared")


if __name__ == "__main__":
    main()
