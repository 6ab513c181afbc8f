.PHONY: test
# Every test against DynamoDB Local (installed and started for the run), clippy, fmt.
test:
	scripts/test.sh

.PHONY: demo
# The example API end to end: DynamoDB Local + cargo lambda watch + a narrated scenario.
demo:
	scripts/demo.sh
