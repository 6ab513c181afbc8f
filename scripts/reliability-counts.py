#!/usr/bin/env python3
"""The reliability run's deterministic counts, committed and checked.

The fault harness (every store call of every feature failed, in a fixed
order), the randomized stream test (`stream_chaos`, its faults drawn from
fixed seeds), the interleaving explorer (every order of its actors' store
calls within its bound, in a fixed order) and the fuzz tests (their cases
drawn from the fixed PROPTEST_RNG_SEED scripts/reliability.sh sets) count
the same cases, faults
and outcomes at every run of the same code and size. `make reliability` writes them here for its size
(`reliability-counts.json`, beside RELIABILITY.md, which shows the full
size's); `make test` runs the reduced size and fails when its counts differ
from the committed ones, so a change that drops or adds cases, or changes
what they meet, is seen and its counts committed with it. The model tests'
outcomes depend on the real clock (their sweeps), so they are not compared.

  reliability-counts.py write SIZE PROPERTY_LOG COUNTS_JSON
  reliability-counts.py check SIZE PROPERTY_LOG COUNTS_JSON
"""

import json
import sys

DETERMINISTIC_PREFIXES = ("fault_harness::", "stream_chaos", "fuzz::", "interleavings")


def deterministic(test):
    return test.startswith(DETERMINISTIC_PREFIXES)


def read_log(path):
    """{test: counts} of the tests the run's property log holds."""
    tests = {}
    with open(path, encoding="utf-8") as log:
        for number, line in enumerate(log, 1):
            line = line.strip()
            if not line:
                continue
            try:
                entry = json.loads(line)
                tests[entry["test"]] = entry["counts"]
            except (ValueError, KeyError, TypeError) as err:
                sys.exit(f"reliability-counts: {path} line {number} is not a test's tally ({err}): run the reliability step again")
    return tests


def read_committed(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError as err:
        sys.exit(f"reliability-counts: {path} is not JSON ({err}): restore it from git or run `make reliability` to write it")


def expected_of(tests):
    """What is committed of a run: the deterministic tests' counts in full."""
    return {test: counts for test, counts in sorted(tests.items()) if deterministic(test)}


def differences(committed, run):
    """Lines naming every count that differs, and every test only one side has."""
    lines = []
    for test in sorted(set(committed) | set(run)):
        if test not in run:
            lines.append(f"  {test}: committed, not reported by this run")
            continue
        if test not in committed:
            lines.append(f"  {test}: reported by this run, not committed")
            continue
        for name in sorted(set(committed[test]) | set(run[test])):
            was, now = committed[test].get(name), run[test].get(name)
            if was != now:
                lines.append(f"  {test}: {name}: committed {was}, this run {now}")
    return lines


def rerun(size):
    """The command that writes a size's counts."""
    if size == "full":
        return "`make reliability` (it writes RELIABILITY.md too)"
    return (
        f"`RELIABILITY_SIZE={size} RELIABILITY_OUT=/tmp/reliability-{size}.md make reliability` "
        "(RELIABILITY.md shows the full size: leave it to `make reliability`)"
    )


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("write", "check") or sys.argv[2] not in ("ci", "full"):
        sys.exit(__doc__)
    action, size, log, path = sys.argv[1:]
    tests = read_log(log)
    run = expected_of(tests)
    if not run:
        sys.exit(f"reliability-counts: {log} holds no fault harness or stream_chaos tally: did those tests run?")
    committed = read_committed(path)
    if action == "write":
        committed[size] = run
        with open(path, "w", encoding="utf-8") as f:
            json.dump(committed, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"reliability-counts: {size} counts of {len(run)} tests written to {path}")
        return
    if size not in committed:
        sys.exit(f"reliability-counts: {path} has no {size} counts: run {rerun(size)} and commit {path}")
    lines = differences(committed[size], run)
    if lines:
        print(f"reliability-counts: this run's {size} counts differ from {path}:", file=sys.stderr)
        print("\n".join(lines), file=sys.stderr)
        sys.exit(
            f"reliability-counts: the cases or what they met changed. If the change is meant, run "
            f"{rerun(size)} and commit {path}; if not, the difference is the finding"
        )
    print(f"reliability-counts: the {size} counts of {len(run)} tests are the committed ones ({path})")


if __name__ == "__main__":
    main()
