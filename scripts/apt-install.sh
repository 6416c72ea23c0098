#!/usr/bin/env bash
# Installs Debian packages a test pass needs, with sudo when not root; used by the set-up
# scripts of the ARM and Windows passes.
#   scripts/apt-install.sh PASS PACKAGE...   (PASS names the pass in the error message)
set -euo pipefail
pass="$1"
shift
[ $# -gt 0 ] || exit 0
if ! command -v apt-get >/dev/null; then
  echo "error: the $pass pass needs $* (or your distribution's equivalents)" >&2
  exit 1
fi
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "== installing $*"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
