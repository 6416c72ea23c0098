#!/usr/bin/env bash
# A Python with the official `openai` package, for the tests that drive `bitnet serve` with
# it (bitnet-cli/tests/serve_embeddings.rs runs scripts/openai_client.py under it): a virtual
# environment at VENV (the test passes one under its target folder), made on first use with
# the pinned version from PyPI, reused after that. Prints the environment's python on stdout.
#
#   scripts/setup-openai.sh VENV
#
# Needs python3 with its venv module and pip (CPython's own; Debian splits it out as
# python3-venv) and PyPI reachable the first time. Any failure exits non-zero with pip's
# message: the test then fails, saying how to set it up, rather than skipping.
set -euo pipefail
version=3.51.0
venv="${1:?usage: scripts/setup-openai.sh VENV}"
python="$venv/bin/python"
has_openai() {
  [ -x "$python" ] &&
    "$python" -c "import openai, sys; sys.exit(openai.__version__ != '$version')" 2>/dev/null
}
if has_openai; then
  echo "$python"
  exit 0
fi
# Made aside and moved into place, so a run cut short leaves no half-made environment.
tmp="$venv.tmp.$$"
rm -rf "$tmp"
python3 -m venv "$tmp" >&2
"$tmp/bin/python" -m pip install --quiet --disable-pip-version-check "openai==$version" >&2
rm -rf "$venv"
mv "$tmp" "$venv"
echo "$python"
