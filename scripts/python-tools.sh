# Sourced by the scripts: makes sure .tools/venv holds the pinned tools of
# scripts/python-tools.txt (cargo-lambda, aws-sam-cli, ziglang) and puts it on PATH.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_venv="$_root/.tools/venv"
_stamp="$_venv/.installed-$(sha256sum "$_root/scripts/python-tools.txt" | cut -c1-16)"
if [ ! -f "$_stamp" ]; then
  echo "tools: installing $(grep -v '^#' "$_root/scripts/python-tools.txt" | tr '\n' ' ')into .tools/venv (pip)" >&2
  python3 -m venv "$_venv"
  "$_venv/bin/pip" install --quiet --disable-pip-version-check -r "$_root/scripts/python-tools.txt" >&2
  touch "$_stamp"
fi
export PATH="$_venv/bin:$PATH"
export SAM_CLI_TELEMETRY=0
