#!/usr/bin/env python3
"""Write the time of each `make test` step into docs/testing.md.

`make test` logs the start of each step, and when each background job
ended, to `$target_dir/make-test/steps.log`. This reads one such log and
replaces the table between the markers in docs/testing.md ("Time and
disk"), so the figures there are the run's, not typed:

    scripts/make-test-times.py STEPS_LOG COMMIT [DOC]

COMMIT names the commit the run tested (the clone's `git rev-parse
--short HEAD`). Exits 1 when the log does not end with "all green": the
times of a failed run describe no working command.
"""

import pathlib
import re
import sys

BEGIN = "<!-- make-test-times: begin (scripts/make-test-times.py writes this) -->"
END = "<!-- make-test-times: end -->"
STEP = re.compile(r"^make test: \[(\d+) s, ([^\]]*)\] (.*)$")
JOB_DONE = re.compile(r"^make test: \[(\d+) s\] ([\w-]+): done in (\d+) s$")
JOB_START = re.compile(r"^make test: \[(\d+) s\] ([\w-]+): started in the background")


def table(log: str, commit: str) -> str:
    steps, jobs, started = [], {}, {}
    for line in log.splitlines():
        if m := STEP.match(line):
            steps.append((int(m[1]), m[3]))
        elif m := JOB_START.match(line):
            started[m[2]] = int(m[1])
        elif m := JOB_DONE.match(line):
            jobs[m[2]] = (int(m[1]), int(m[3]))
    if not steps or not steps[-1][1].startswith("all green"):
        sys.exit("make-test-times: the log does not end with `all green`: no times written")
    total = steps[-1][0]
    rows = [
        "| step | start (s) | took (s) |",
        "|---|---:|---:|",
    ]
    for (start, name), (end, _) in zip(steps[1:-1], steps[2:]):
        rows.append(f"| {name} | {start:,} | {end - start:,} |")
    for name, start in started.items():
        if name in jobs:
            # `done in` counts from the job's start to its await: the job
            # itself may have ended earlier, never later.
            rows.append(f"| {name} (in the background) | {start:,} | at most {jobs[name][1]:,} |")
    rows.append(f"| **all green** | | **{total:,}** ({total / 60:.1f} min) |")
    if size := re.search(r"; (\S+) in ", steps[-1][1]):
        rows.append(f"| target directory at the end | | {size[1]} |")
    return (
        f"From `make test` in a fresh clone of commit {commit} on the 2-core machine "
        "(crates and Debian packages already downloaded), its "
        "`target/make-test/steps.log`:\n\n" + "\n".join(rows)
    )


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    log = pathlib.Path(sys.argv[1]).read_text()
    doc = pathlib.Path(sys.argv[3] if len(sys.argv) == 4 else "docs/testing.md")
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"make-test-times: {doc} has no markers ({BEGIN} ... {END})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{table(log, sys.argv[2])}\n{END}{tail}")
    print(f"make-test-times: {doc} updated from {sys.argv[1]}")


if __name__ == "__main__":
    main()
