"""Drive SAM CLI's local runtime for `make sam-local` (scripts/sam-local.sh runs
this inside its private network namespace, with the Docker daemon, DynamoDB
Local and the tables ready).

1. `sam local invoke` for every step of expectations.tsv, in order, and every
   file in events/ must appear there: one line per invoke with what it got.
2. `sam local start-api` and curl: POST /orders twice with one key (201, then
   the replay), two concurrent POSTs with a new key (one 201; the other a 409
   with Retry-After, or the replay), then GET of the order.

`sam local invoke` exits 0 even when the function panics or its container
cannot be reached, so every step is judged by the response it printed.
Exits 1 when any step or request broke its expectation.
"""

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ABSENT = object()


def log(msg):
    print(msg, flush=True)


class Run:
    def __init__(self, args):
        self.args = args
        self.failures = []
        self.outputs = {}
        self.logs = Path(args.logs)
        self.logs.mkdir(parents=True, exist_ok=True)

    def sam_common(self):
        return [
            "--template",
            self.args.template,
            "--skip-pull-image",
            "--invoke-image",
            self.args.invoke_image,
            "--add-host",
            "host.docker.internal:host-gateway",
        ]

    def fail(self, what, detail=""):
        self.failures.append(what)
        log(f"  FAIL {what}")
        if detail:
            for line in detail.rstrip().splitlines()[-25:]:
                log(f"       {line}")


# -- expectations ------------------------------------------------------------


def parse_manifest(path):
    steps = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) < 4:
            raise SystemExit(f"{path}:{n}: want `step event function expectation...`: {line!r}")
        step, event, function, *expects = fields
        steps.append({"step": step, "event": event, "function": function, "expects": expects, "line": n})
    return steps


def lookup(output, path):
    """A value of an invoke's output: `status`, `header.<name>`, `body`,
    `body.<field>` for HTTP responses; `<field>` or `$` (all of it) otherwise."""
    if path == "$":
        return output
    if path == "status" and "statusCode" in output:
        return output["statusCode"]
    if path.startswith("header."):
        name = path[len("header.") :].lower()
        headers = {k.lower(): v for k, v in (output.get("headers") or {}).items()}
        multi = {k.lower(): v for k, v in (output.get("multiValueHeaders") or {}).items()}
        if name in headers:
            return headers[name]
        if name in multi and multi[name]:
            return multi[name][0]
        return ABSENT
    if path == "body" or path.startswith("body."):
        body = output.get("body", ABSENT)
        if path == "body":
            return body
        try:
            value = json.loads(body)
        except (TypeError, ValueError):
            return ABSENT
        for part in path.split(".")[1:]:
            value = value.get(part, ABSENT) if isinstance(value, dict) else ABSENT
        return value
    value = output
    for part in path.split("."):
        value = value.get(part, ABSENT) if isinstance(value, dict) else ABSENT
    return value


EXPECT = re.compile(r"^(?P<path>[^=!<>]+)(?P<op>!=|>=|=)(?P<value>.*)$")


def check(expect, output, outputs):
    """(ok, shown) for one `path=value`, `path!=value` or `path>=number`;
    `@step` as the value means that path's value in an earlier step."""
    m = EXPECT.match(expect)
    if not m:
        raise SystemExit(f"expectation {expect!r}: want path=value, path!=value or path>=number")
    path, op, raw = m["path"], m["op"], m["value"]
    got = lookup(output, path)
    if raw.startswith("@"):
        want = lookup(outputs[raw[1:]], path)
    elif raw == "absent":
        want = ABSENT
    else:
        want = json.loads(raw)
    ok = {"=": got == want, "!=": got != want, ">=": isinstance(got, (int, float)) and got >= want}[op]
    shown = "absent" if got is ABSENT else json.dumps(got)
    if path in ("body", "$") and len(shown) > 40:
        shown = "(same)" if ok and raw.startswith("@") else shown[:40] + "..."
    return ok, f"{path}={shown}"


def response_json(stdout):
    """The function's response: SAM prints it as the last line of stdout."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") or line.startswith("["):
            return json.loads(line)
    return None


# -- sam local invoke ---------------------------------------------------------


def invoke_all(run):
    steps = parse_manifest(run.args.manifest)
    events = sorted(p.name for p in Path(run.args.events).glob("*.json"))
    covered = {s["event"] for s in steps}
    for name in events:
        if name not in covered:
            run.fail(f"events/{name} has no expected outcome in {run.args.manifest}")
    for s in steps:
        if s["event"] not in events:
            run.fail(f"{run.args.manifest}:{s['line']}: events/{s['event']} does not exist")
    if run.failures:
        return

    for s in steps:
        cmd = [
            "sam",
            "local",
            "invoke",
            s["function"],
            "--event",
            str(Path(run.args.events) / s["event"]),
            "--env-vars",
            run.args.env_vars,
            *run.sam_common(),
        ]
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired as e:
            log(f"invoke  {s['event']:<46} {s['function']:<20} -> no response in 180 s  FAIL")
            run.fail(f"{s['step']}: sam local invoke did not finish in 180 s", str(e.stderr or ""))
            continue
        took = time.monotonic() - started
        log_file = run.logs / f"invoke-{s['step']}.log"
        log_file.write_text(f"$ {shlex.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
        head = f"invoke  {s['event']:<46} {s['function']:<20}"
        try:
            output = response_json(proc.stdout)
        except ValueError:
            output = None
        if not isinstance(output, dict):
            log(f"{head} -> no response  {took:4.1f} s  FAIL")
            run.fail(f"{s['step']}: sam local invoke printed no JSON response (exit {proc.returncode})", proc.stderr)
            continue
        run.outputs[s["step"]] = output
        results = [check(e, output, run.outputs) for e in s["expects"]]
        if "errorType" in output and not any(e.startswith("errorType") for e in s["expects"]):
            results.append((False, f"errorType={output['errorType']} ({output.get('errorMessage', '')[:80]})"))
        ok = all(r[0] for r in results)
        log(f"{head} -> {' '.join(r[1] for r in results)}  {took:4.1f} s  {'ok' if ok else 'FAIL'}")
        if not ok:
            bad = [f"{e} (got {r[1]})" for e, r in zip(s["expects"], results) if not r[0]]
            run.fail(f"{s['step']}: expected {' '.join(bad) or 'no error'}", f"stdout: {proc.stdout}\n{proc.stderr}")


# -- sam local start-api + curl ------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(url, method="GET", key=None, body=None):
    cmd = ["curl", "-sS", "-i", "--max-time", "60", "-X", method, url]
    if key:
        cmd += ["-H", f"Idempotency-Key: {key}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", body]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    took = time.monotonic() - started
    if proc.returncode != 0:
        return {"status": None, "headers": {}, "body": proc.stderr.strip(), "took": took}
    head, _, text = proc.stdout.replace("\r\n", "\n").partition("\n\n")
    lines = head.splitlines()
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return {"status": status, "headers": headers, "body": text, "took": took}


def show(label, res):
    extra = []
    for name in ("idempotent-replayed", "retry-after"):
        if name in res["headers"]:
            extra.append(f"{name}: {res['headers'][name]}")
    status = res["status"] if res["status"] is not None else f"no answer ({res['body'][:60]})"
    log(f"curl    {label:<66} -> {status}{'  ' + ', '.join(extra) if extra else ''}  {res['took']:4.1f} s")


def start_api(run):
    port = free_port()
    cmd = [
        "sam",
        "local",
        "start-api",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--env-vars",
        run.args.api_env_vars,
        *run.sam_common(),
    ]
    log_path = run.logs / "start-api.log"
    log_file = open(log_path, "w")
    log_file.write(f"$ {shlex.join(cmd)}\n")
    log_file.flush()
    # Its own process group, so that stopping it reaches the workers it starts.
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                run.fail(f"sam local start-api exited ({proc.returncode}) before listening", log_path.read_text())
                return
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        else:
            run.fail("sam local start-api did not listen within 90 s", log_path.read_text())
            return
        log(f"start-api listening on 127.0.0.1:{port}")
        api_checks(run, f"http://127.0.0.1:{port}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log_file.close()


def api_checks(run, base):
    body = json.dumps({"customer_id": "cus_sam_local", "amount": 2500, "currency": "EUR"})
    key = f"sam-local-{uuid.uuid4().hex[:12]}"

    first = curl(f"{base}/orders", "POST", key, body)
    show(f"POST /orders (key {key})", first)
    if first["status"] != 201 or "idempotent-replayed" in first["headers"]:
        run.fail(f"first POST: expected 201 without Idempotent-Replayed, got {first['status']}", first["body"])
        return
    again = curl(f"{base}/orders", "POST", key, body)
    show(f"POST /orders again (key {key})", again)
    if not (
        again["status"] == 201
        and again["headers"].get("idempotent-replayed") == "true"
        and again["body"] == first["body"]
    ):
        run.fail(f"retry: expected the replay (201, Idempotent-Replayed: true, same body), got {again['status']}")

    order_id = json.loads(first["body"])["order_id"]
    got = curl(f"{base}/orders/{order_id}")
    show(f"GET /orders/{order_id}", got)
    if got["status"] != 200 or json.loads(got["body"] or "{}").get("order_id") != order_id:
        run.fail(f"GET /orders/{order_id}: expected 200 with the order, got {got['status']}", got["body"])

    key2 = f"sam-local-{uuid.uuid4().hex[:12]}"
    results = [None, None]

    def post(i):
        results[i] = curl(f"{base}/orders", "POST", key2, body)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, res in enumerate(results):
        show(f"POST /orders concurrent #{i + 1} (key {key2})", res)
    fresh = [r for r in results if r["status"] == 201 and "idempotent-replayed" not in r["headers"]]
    others = [r for r in results if r not in fresh]
    if len(fresh) != 1:
        run.fail(f"concurrent: expected exactly one first execution (201), got {[r['status'] for r in results]}")
        return
    other = others[0]
    if other["status"] == 409 and other["headers"].get("retry-after"):
        log("        the duplicate arrived while the first ran: 409 with Retry-After")
    elif (
        other["status"] == 201
        and other["headers"].get("idempotent-replayed") == "true"
        and other["body"] == fresh[0]["body"]
    ):
        log("        the duplicate arrived after the first completed: the replay")
    else:
        run.fail(f"concurrent: the duplicate got {other['status']}, not a 409 with Retry-After or the replay")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--template", required=True)
    parser.add_argument("--env-vars", required=True)
    parser.add_argument("--api-env-vars", required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--invoke-image", required=True)
    parser.add_argument("--logs", required=True)
    run = Run(parser.parse_args())

    invoke_all(run)
    start_api(run)

    if run.failures:
        log(f"sam-local: {len(run.failures)} failure(s): " + "; ".join(run.failures))
        log(f"sam-local: full SAM output per step in {run.logs}")
        sys.exit(1)


if __name__ == "__main__":
    main()
