# shellcheck shell=bash
# Sourced by the scripts: makes sure .tools/venv holds the pinned tools of
# scripts/python-tools.txt (cargo-lambda, aws-sam-cli, ziglang) and puts it on PATH.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/common.sh
source "$_root/scripts/common.sh"
pinned_venv tools "$_root/.tools/venv" "$_root/scripts/python-tools.txt"
export PATH="$_root/.tools/venv/bin:$PATH"
export SAM_CLI_TELEMETRY=0
