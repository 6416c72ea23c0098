#!/usr/bin/env bash
# Self-test of scripts/module-cycles.py: a throwaway workspace in a temporary directory, one
# crate per case, each checked alone for its exit status and report, then all together.
#   sibling   two files naming each other's items: a circle
#   parent    a child naming `super::X` of its parent while the parent calls the child: a circle
#   facade    a parent whose only tie to its child is a `pub use` of the child's items: none
#             (and a circle under --count-facades)
#   error     a file and its own error.rs naming each other: allowed
set -euo pipefail
script="$(cd "$(dirname "$0")" && pwd)/module-cycles.py"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

put() {  # put FILE TEXT: writes TEXT to $root/FILE, creating its directory
  mkdir -p "$(dirname "$root/$1")"
  printf '%s\n' "$2" >"$root/$1"
}

cat >"$root/Cargo.toml" <<'EOF'
[workspace]
members = ["sibling", "parent", "facade", "error"]
EOF

put sibling/src/lib.rs 'mod x;
mod y;'
put sibling/src/x.rs 'use crate::y::Y;
pub struct X(pub Option<Box<Y>>);'
put sibling/src/y.rs 'pub struct Y(pub Option<Box<crate::x::X>>);'

put parent/src/lib.rs 'mod p;'
put parent/src/p/mod.rs 'mod c;
pub struct X;
pub fn f() -> X {
    c::g()
}'
put parent/src/p/c.rs 'use super::X;
pub fn g() -> X {
    X
}'

put facade/src/lib.rs 'mod p;'
put facade/src/p/mod.rs 'mod c;
pub use c::Y;
pub struct X;'
put facade/src/p/c.rs '// A comment naming crate::p::X is no edge either.
pub struct Y(pub super::X);'

put error/src/lib.rs 'mod p;'
put error/src/p/mod.rs 'mod error;
pub use error::PError;
pub struct Limit(pub u32);
pub fn check(n: u32) -> Result<(), PError> {
    error::over(n, Limit(8))
}'
put error/src/p/error.rs 'use super::Limit;
pub struct PError(pub u32);
pub fn over(n: u32, limit: Limit) -> Result<(), PError> {
    if n > limit.0 { Err(PError(n)) } else { Ok(()) }
}'

failures=0
# expect NAME WANT_RC PATTERN... -- ARGS: runs the script with ARGS; its exit status must be
# WANT_RC and its output must hold every PATTERN (an extended regex).
expect() {
  local name="$1" want="$2"
  shift 2
  local patterns=()
  while [ "$1" != -- ]; do
    patterns+=("$1")
    shift
  done
  shift
  local out rc=0
  out="$(python3 "$script" --root "$root" "$@" 2>&1)" || rc=$?
  local ok=1
  [ "$rc" = "$want" ] || ok=0
  for p in "${patterns[@]}"; do
    grep -Eq -- "$p" <<<"$out" || ok=0
  done
  if [ "$ok" = 1 ]; then
    echo "ok    $name"
  else
    echo "FAIL  $name: exit status $rc (want $want); output:"
    sed 's/^/      /' <<<"$out"
    failures=$((failures + 1))
  fi
}

expect "sibling circle" 1 \
  'CIRCLE, 2 files' 'sibling/src/x.rs:1: crate::y::Y  -> sibling/src/y.rs' \
  'sibling/src/y.rs:1: crate::x::X  -> sibling/src/x.rs' '^1 import circle' \
  -- --crate sibling
expect "child naming its parent's item" 1 \
  'CIRCLE, 2 files' 'parent/src/p/c.rs:1: super::X  -> parent/src/p/mod.rs' \
  'parent/src/p/mod.rs:4: c::g  -> parent/src/p/c.rs' '^1 import circle' \
  -- --crate parent
expect "facade re-export" 0 '^no import circles' -- --crate facade
expect "facade re-export, --count-facades" 1 \
  'CIRCLE, 2 files' 'facade/src/p/mod.rs:2: c::Y  -> facade/src/p/c.rs' \
  -- --crate facade --count-facades
expect "file and its error.rs" 0 \
  'allowed \(a file and its error type\), 2 files' 'error/src/p/error.rs:1: super::Limit' \
  '^no import circles' \
  -- --crate error
expect "whole workspace" 1 '^2 import circle\(s\)' --

if [ "$failures" != 0 ]; then
  echo "module-cycles self-test: $failures failure(s)" >&2
  exit 1
fi
echo "module-cycles self-test: all passed"
