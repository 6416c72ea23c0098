#!/usr/bin/env bash
# The Python package's tests: builds the wheel once (release, as `pip install ./python`
# does) into a virtual environment with pytest and openai, then runs python/tests against
# the shipped model and the `bitnet` CLI (the greedy reference text).
#
#   python/test.sh                 # venv and build in $CARGO_TARGET_DIR (default: target/)
#   BITNET_BIN=path/to/bitnet python/test.sh
#
# Needs python3 with venv and PyPI (maturin, pytest, openai) on first use.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
target="${CARGO_TARGET_DIR:-$repo/target}"
venv="$target/python-venv"
export CARGO_TARGET_DIR="$target"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet "maturin>=1.9.4,<2" pytest openai
fi

# One release build, installed into the venv (the same wheel `pip install ./python` makes).
(cd "$here" && "$venv/bin/maturin" build --release --out "$target/python-wheels" ${JOBS:+--jobs "$JOBS"})
"$venv/bin/pip" install --quiet --force-reinstall --no-deps "$target"/python-wheels/bitnet-*.whl

if [ -z "${BITNET_BIN:-}" ]; then
    cargo build --release --locked --manifest-path "$repo/Cargo.toml" -p bitnet-cli ${JOBS:+-j "$JOBS"}
    export BITNET_BIN="$target/release/bitnet"
fi

cd "$here/tests"
exec "$venv/bin/python" -m pytest -q "$@"
