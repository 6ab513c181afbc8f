"""Cold-start probe for Powertools for AWS Lambda (Python) idempotency.

Run as a fresh process; the caller times it from spawn to the line on stdout:

    POWERTOOLS_TABLE=<existing table, partition key id (S)> \
        .tools/bench-venv/bin/python scripts/bench/powertools_cold.py

It pays what a Lambda cold start pays: importing Powertools and boto3 (through
pt_common), building the client and persistence layer, then one first
execution of the decorated handler with a fresh key. On success stdout holds
`{"ok": true, "status": 201, ...}` with the phases it timed itself (import of
Powertools and boto3, set-up of the client and handler, the invocation, in
milliseconds; spawn to the first of them is the interpreter's start) and the
exit code is 0; on failure stdout stays empty and stderr says why.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402

# pt_common sits in the work tree, which ignores no __pycache__: compile it in memory.
sys.dont_write_bytecode = True
import pt_common  # noqa: E402

_IMPORTED = time.perf_counter()


def main() -> int:
    table = os.environ.get("POWERTOOLS_TABLE")
    if not table:
        raise pt_common.fail("POWERTOOLS_TABLE is not set: name an existing table with partition key `id` (S)")
    client = pt_common.make_client()
    handler = pt_common.make_handler(client, table)
    set_up = time.perf_counter()
    event = pt_common.make_event(f"cold-{uuid.uuid4()}")
    try:
        response = handler(event, pt_common.FakeLambdaContext())
    except Exception as exc:  # any failure of the one invocation is reported, not traced
        raise pt_common.fail(f"invocation against table {table!r} failed: {type(exc).__name__}: {exc}") from exc
    status = response.get("statusCode")
    if status != pt_common.STATUS_CREATED:
        raise pt_common.fail(f"handler answered status {status!r}, expected {pt_common.STATUS_CREATED}")
    invoked = time.perf_counter()
    phases = {
        "import_ms": (_IMPORTED - _STARTED) * 1e3,
        "setup_ms": (set_up - _IMPORTED) * 1e3,
        "invocation_ms": (invoked - set_up) * 1e3,
    }
    print(json.dumps({"ok": True, "status": status, **phases}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
