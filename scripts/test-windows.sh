#!/usr/bin/env bash
# The Windows pass of the test suite, on an x86-64 Linux machine: cross-build for
# x86_64-pc-windows-gnu with MinGW-w64 and run the binaries under wine (Debian's wine64).
# Wine runs x86-64 code natively (no emulation: CPUID and every instruction are the host's),
# so what it checks is what differs on Windows: the OS layer (file maps, console, Ctrl-C,
# sockets, threads and their affinity, paths) and the Windows ABI, not the kernels' speed.
# Only what proves that runs here, not the whole suite (its Unix-only parts, the ptys,
# FIFOs and signals, are `cfg(unix)`, and the rest is the same code as on Linux):
#   1. the kernel tests (every set this CPU has against the scalar reference), each checked
#      to offer exactly the sets the Linux build sees (a lost set fails, it is not skipped);
#   2. the golden logits (bitnet.cpp's and llama.cpp's, testdata/golden), prefill and decode,
#      every set this CPU has: the whole engine (model map, thread pool, KV cache) on Windows;
#      and the thread pool's own tests: pinning, and the caller's CPUs given back, go through
#      Win32 there (SetThreadAffinityMask, the thread's group affinity, the core topology);
#   3. the shipped model (models/shakespeare.gguf): the README's sample and the greedy text
#      byte for byte as this machine's Linux build writes them, with each kernel set;
#   4. `bitnet-convert` on the shipped checkpoint (models/shakespeare-hf): the shipped GGUF,
#      byte for byte (safetensors maps, the output's temporary file and rename);
#   5. `bitnet serve`: one chat completion over HTTP (its chat template rendered by a worker
#      process in its Job Object), then Ctrl-C (wine turns the SIGINT into the console's
#      CTRL_C_EVENT): the server must say it stopped and exit within 20 s;
#   6. `cargo check` for x86_64-pc-windows-msvc, the library and binaries (no link: MSVC's
#      linker is not here), so the MSVC target does not rot.
# Everything is built in ONE cargo invocation, in the dev profile (the tests' own; the kernels
# are at opt-level 3 there): a release build (LTO, one codegen unit) costs more than these runs
# save. The dependencies are built at opt-level 0 here, not 2: the runs spend their time in the
# workspace's own crates, and a cold build on 2 cores took 4m13s instead of 7m42s (the whole
# pass 5m33s instead of 9m12s; 1m10s with the build up to date). Each wine command has a time
# limit, so a hang fails the pass.
# scripts/setup-windows.sh installs what is missing (rustup targets, mingw-w64, wine64).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
target=x86_64-pc-windows-gnu
target_dir="${CARGO_TARGET_DIR:-target}"

./scripts/setup-windows.sh
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

# Wine: its own prefix beside the build (created on first use, ~15 s), no debug chatter, no
# window system. /usr/lib/wine/wine64 directly: Debian's `wine` wrapper wants wine32 too.
WINEPREFIX="$(cd "$target_dir" 2>/dev/null && pwd || echo "$PWD/$target_dir")/wine-prefix"
export WINEPREFIX WINEDEBUG=-all DISPLAY=
wine=/usr/lib/wine/wine64
[ -x "$wine" ] || wine="$(command -v wine64)"
winrun() { timeout 600 "$wine" "$@"; }

tmp="$(mktemp -d)"
server_pid=
cleanup() {
  [ -z "$server_pid" ] || kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

step "Windows builds: kernel tests, golden logits test, bitnet.exe, bitnet-convert.exe"
# The kernel tests (every integration test of bitnet-kernels, by name), the golden logits
# test of bitnet-core, and through one small test each of bitnet-cli and bitnet-convert their
# binaries. One invocation: separate ones would resolve features anew and compile the shared
# crates again (see scripts/test-arm.sh).
kernel_names=$(cd bitnet-kernels/tests && ls -- *.rs | sed 's/\.rs$//')
test_args=()
for t in $kernel_names; do test_args+=(--test "$t"); done
built="$(
  cargo test --no-run -q -j "$jobs" --target "$target" --message-format=json \
    --config 'profile.dev.package."*".opt-level=0' \
    -p bitnet-kernels -p bitnet-core -p bitnet-cli -p bitnet-convert "${test_args[@]}" \
    --test golden_engine --test threadpool --test cli_head --test shipped |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["src_path"], m["executable"])'
)"
kernel_tests=$(echo "$built" | awk '$1 ~ /\/bitnet-kernels\/tests\/[^\/]*\.rs$/ { print $2 }')
golden_test=$(echo "$built" | awk '$1 ~ /\/bitnet-core\/tests\/golden_engine\.rs$/ { print $2 }')
pool_test=$(echo "$built" | awk '$1 ~ /\/bitnet-core\/tests\/threadpool\.rs$/ { print $2 }')
[ "$(echo "$kernel_tests" | wc -w)" = "$(echo "$kernel_names" | wc -w)" ] && [ -n "$golden_test" ] &&
  [ -n "$pool_test" ] ||
  { echo "error: the Windows tests were not all built" >&2; exit 1; }
win_bitnet="$target_dir/$target/debug/bitnet.exe"
win_convert="$target_dir/$target/debug/bitnet-convert.exe"
[ -x "$win_bitnet" ] && [ -x "$win_convert" ] ||
  { echo "error: bitnet.exe or bitnet-convert.exe was not built" >&2; exit 1; }
# scripts/test.sh passes the binary its tests built (a plain `cargo build -p bitnet-cli`
# would resolve features anew and rebuild much of the tree).
host_bitnet="${BITNET_BIN:-}"
if [ -z "$host_bitnet" ]; then
  cargo build -q -j "$jobs" -p bitnet-cli
  host_bitnet="$target_dir/debug/bitnet"
fi
# The test data, unpacked natively (a no-op after scripts/test.sh); wine reads the same path
# through its Z: drive.
BITNET_TESTDATA="$(cargo run -q -j "$jobs" -p bitnet-testdata)"
export BITNET_TESTDATA

# 6. MSVC, checked only; it runs beside the wine jobs below (they use one core each).
step "cargo check --target x86_64-pc-windows-msvc (background)"
cargo check -q -j "$jobs" --workspace --target x86_64-pc-windows-msvc >"$tmp/msvc.log" 2>&1 &
msvc_pid=$!

[ -d "$WINEPREFIX" ] || { step "wine prefix"; winrun wineboot --init >/dev/null 2>&1 || true; }
# Rust's standard library (1.78 and later) takes its random bytes from ProcessPrng in
# bcryptprimitives.dll, which wine only has from version 9 (Debian 12 ships 8.0): without it
# no Rust program starts ("status c0000135"). Where the prefix lacks it, a shim built here
# with MinGW-w64 supplies ProcessPrng through RtlGenRandom. It is test scaffolding for wine
# alone: Windows 10 and later have the real DLL.
shim="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -e "$shim" ]; then
  cat >"$tmp/bcryptprimitives.c" <<'C'
#include <windows.h>
#include <ntsecapi.h>
BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!RtlGenRandom(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
C
  x86_64-w64-mingw32-gcc -O2 -shared -Wl,--kill-at -o "$shim" "$tmp/bcryptprimitives.c" -ladvapi32
fi
sets="$("$host_bitnet" inspect --json models/shakespeare.gguf |
  python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["kernels"]["available"]))')"
failed=()

# 1. The kernel tests, in the package's directory as `cargo test` runs them.
step "kernel tests under wine (sets: $sets)"
for exe in $kernel_tests; do
  if ! (cd bitnet-kernels && BITNET_EXPECT_KERNELS="$sets" winrun "$exe" -q 2>&1 |
    grep -E '^test result|FAILED|panicked' | sed "s|^|$(basename "$exe" .exe | sed 's/-[0-9a-f]*$//'): |"; exit "${PIPESTATUS[0]}"); then
    failed+=("kernels:$(basename "$exe")")
  fi
done

# 2. The golden logits, every set this CPU has; the thread pool.
step "golden logits and thread pool under wine"
for exe in "$golden_test" "$pool_test"; do
  if ! (cd bitnet-core && winrun "$exe" -q 2>&1 | grep -E '^test result|FAILED|panicked' |
    sed "s|^|$(basename "$exe" .exe | sed 's/-[0-9a-f]*$//'): |"; exit "${PIPESTATUS[0]}"); then
    failed+=("$(basename "$exe" .exe)")
  fi
done

# 3. The shipped model's text, per set, against this machine's Linux build.
step "shipped model under wine: README sample and greedy text, per set"
model=models/shakespeare.gguf
awk '/^\$ bitnet generate -m models\/shakespeare.gguf -p "ROMEO:" -n 80 -s 1$/{on=1; next}
     on && /^```/{exit} on' README.md >"$tmp/readme.txt"
[ -s "$tmp/readme.txt" ] || { echo "error: README sample not found" >&2; exit 1; }
outputs_of() { # OUT COMMAND...: sampled and greedy text
  "${@:2}" generate -t 1 -m "$model" -p "ROMEO:" -n 80 -s 1 2>/dev/null >"$1.sampled"
  "${@:2}" generate -t 1 -m "$model" -p "ROMEO:" -n 80 --temp 0 2>/dev/null >"$1.greedy"
}
for isa in ${sets//,/ }; do
  # A failed run leaves its output short; the comparison below reports it.
  BITNET_KERNEL=$isa outputs_of "$tmp/linux-$isa" "$host_bitnet" || true
  BITNET_KERNEL=$isa outputs_of "$tmp/win-$isa" winrun "$win_bitnet" || true
  ok=1
  for kind in sampled greedy; do
    if ! cmp -s "$tmp/linux-$isa.$kind" "$tmp/win-$isa.$kind"; then
      echo "error: $isa ($kind) differs from the Linux build's output:"
      diff "$tmp/linux-$isa.$kind" "$tmp/win-$isa.$kind" || true
      ok=0
    fi
  done
  head -c "$(wc -c <"$tmp/readme.txt")" "$tmp/win-$isa.sampled" | cmp -s - "$tmp/readme.txt" ||
    { echo "error: $isa does not write the README's sample"; ok=0; }
  if [ $ok = 1 ]; then
    echo "$isa: README sample and greedy text identical to Linux"
  else
    failed+=("shipped-$isa")
  fi
done

# 4. The converter on the shipped checkpoint: the shipped GGUF, byte for byte.
step "bitnet-convert under wine: models/shakespeare-hf"
if winrun "$win_convert" models/shakespeare-hf -o "$tmp/shakespeare.gguf" >"$tmp/convert.log" 2>&1 &&
  cmp -s "$tmp/shakespeare.gguf" "$model"; then
  echo "bitnet-convert: the shipped GGUF, byte for byte ($(wc -c <"$model") bytes)"
else
  cat "$tmp/convert.log"
  echo "error: bitnet-convert under wine did not reproduce $model"
  failed+=(convert)
fi

# 5. The server: a chat completion, then Ctrl-C.
step "bitnet serve under wine: a chat completion, then Ctrl-C"
serve_ok=0
"$wine" "$win_bitnet" serve -m "$model" -t 1 --port 0 >"$tmp/serve.out" 2>"$tmp/serve.err" &
server_pid=$!
for _ in $(seq 120); do
  grep -q '^listening on' "$tmp/serve.out" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.5
done
url="$(sed -n 's/^listening on //p' "$tmp/serve.out" | head -1)"
if [ -n "$url" ] && python3 - "$url" <<'PY'; then
import json, sys, urllib.request
req = urllib.request.Request(
    sys.argv[1] + "/v1/chat/completions",
    data=json.dumps({"messages": [{"role": "user", "content": "ROMEO:"}],
                     "max_tokens": 16, "temperature": 0}).encode(),
    headers={"Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=120))
text = reply["choices"][0]["message"]["content"]
assert text, reply
print("chat completion:", repr(text[:60]), reply["usage"])
PY
  kill -INT "$server_pid"
  for _ in $(seq 40); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$server_pid" 2>/dev/null; then
    echo "error: bitnet serve still running 20 s after Ctrl-C"
  elif grep -q 'stopped' "$tmp/serve.err"; then
    echo "Ctrl-C: the server stopped ($(grep -c . "$tmp/serve.err") lines on stderr)"
    serve_ok=1
  else
    echo "error: bitnet serve ended on Ctrl-C without saying it stopped"
  fi
fi
wait "$server_pid" 2>/dev/null || true
server_pid=
if [ $serve_ok = 0 ]; then
  cat "$tmp/serve.out" "$tmp/serve.err"
  failed+=(serve)
fi

step "cargo check --target x86_64-pc-windows-msvc"
if wait "$msvc_pid"; then
  echo "x86_64-pc-windows-msvc: checks"
else
  cat "$tmp/msvc.log"
  failed+=(msvc-check)
fi

# This prefix's wineserver (and any worker left with it) ends now, not seconds later.
"$(dirname "$wine")/wineserver64" -k 2>/dev/null || wineserver -k 2>/dev/null || true

if [ ${#failed[@]} -gt 0 ]; then
  echo "error: Windows pass failed: ${failed[*]}" >&2
  exit 1
fi
step "Windows pass: ok"
