.PHONY: test
# Every test against DynamoDB Local (installed and started for the run), clippy, fmt.
test:
	scripts/test.sh
