.PHONY: test
# scripts/test.sh: the builds (clippy lints the workspace as it compiles;
# one build of each dependency, scripts/workspace-hack.py), every test
# (unit, the integration suite in shards, doc) against DynamoDB Local, a
# local S3 server, Redis (a server and a cluster) and PostgreSQL (with
# PgBouncer), all installed and started for the run; reliability at a
# reduced size; clippy of the library without HTTP; fmt; the publish dry
# run of both crates with docs.rs-like docs; the minimum Rust version; sam
# validate --lint of the three templates; the SAM transform and IAM checks;
# the new-project template; the demo; the deploy rehearsal (its release
# build made while the tests run); sam-local (docs/testing.md).
test:
	scripts/test.sh

.PHONY: deploy-check
# `sam build` (release, arm64) of template.yaml and deploy/*.yaml, then `sam
# package` / `sam deploy` against moto on loopback: every resource read back,
# an update that keeps the tables (deploy/README.md, "Deploy rehearsal").
# Part of `make test`; 14 min cold on 2 shared cores (the release build), ~70 s warm.
deploy-check:
	scripts/deploy-check.sh

.PHONY: publish-check
# Both crates as crates.io takes them, each verified alone: `cargo publish
# --dry-run` with cargo's verification (built from its archive with its own
# features), then the docs as docs.rs builds them. `make test` runs it
# without the verification build (scripts/publish-check.sh).
publish-check:
	PUBLISH_CHECK_VERIFY=1 scripts/publish-check.sh

.PHONY: demo
# The example API end to end: DynamoDB Local + cargo lambda watch + a narrated scenario.
demo:
	scripts/demo.sh

.PHONY: sam-local
# Every sample event through `sam local invoke`, and `sam local start-api` + curl,
# offline: Docker daemon in a private network namespace (root; ~1-3 min).
sam-local:
	scripts/sam-local.sh

.PHONY: bench-sweep
# Sweep 10,000 stuck records on DynamoDB Local (release build); prints items/s.
bench-sweep:
	scripts/dynamodb-local.sh cargo bench -p integration-tests --bench sweep

.PHONY: bench
# Benchmarks vs Powertools Python on DynamoDB Local; writes BENCHMARKS.md (release build).
bench:
	scripts/bench.sh

.PHONY: bench-logs
# Log bytes per invocation vs Powertools (with its Metrics utility) on DynamoDB
# Local; updates BENCHMARKS.md's log section. Part of `make bench`.
bench-logs:
	scripts/bench-logs.sh

.PHONY: bench-cutover
# What the cut-over window from Powertools costs a first execution, and that it
# costs nothing after (release build); updates BENCHMARKS.md. Part of `make bench`.
bench-cutover:
	scripts/bench-cutover.sh

.PHONY: bench-capacity
# Read/write units per invocation vs Powertools on DynamoDB Local (one metering
# proxy for both); updates BENCHMARKS.md's capacity section. Part of `make bench`.
bench-capacity:
	scripts/bench-capacity.sh

.PHONY: bench-engines
# Round trips and latency per invocation on every store engine (DynamoDB Local,
# Redis, Redis Cluster, PostgreSQL direct and through PgBouncer, started for the
# run; release build); updates BENCHMARKS.md's engines section. Part of `make bench`.
bench-engines:
	scripts/bench-engines.sh

.PHONY: reliability
# Storm, crash and fault injection on DynamoDB Local; writes RELIABILITY.md.
reliability:
	scripts/reliability.sh
