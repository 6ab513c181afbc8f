# shellcheck shell=bash
# Sourced like scripts/bench-venv.sh: installs Powertools for AWS Lambda
# (TypeScript) idempotency and the AWS SDK's DynamoDB client, pinned in
# tests/powertools/typescript/package-lock.json, into .tools/powertools-node
# (`npm ci`) once per version of that lock file, and sets
# `powertools_node_modules` to its node_modules folder (what
# tests/powertools/typescript/write_expressions.mjs imports from).
powertools_node="$(pwd)/.tools/powertools-node"
powertools_node_lock=tests/powertools/typescript/package-lock.json
powertools_node_stamp="$powertools_node/.installed-$(sha256sum "$powertools_node_lock" | cut -c1-16)"
if [ ! -f "$powertools_node_stamp" ]; then
  echo "powertools-node: installing @aws-lambda-powertools/idempotency (npm ci) into $powertools_node" >&2
  rm -rf "$powertools_node" && mkdir -p "$powertools_node"
  cp tests/powertools/typescript/package.json "$powertools_node_lock" "$powertools_node/"
  (cd "$powertools_node" && npm ci --silent --no-audit --no-fund >&2)
  touch "$powertools_node_stamp"
fi
powertools_node_modules="$powertools_node/node_modules"
export powertools_node_modules
unset powertools_node powertools_node_lock powertools_node_stamp
