#!/usr/bin/env bash
# The server's load run (docs/serve.md, "Load figures"): one `bitnet serve` on loopback over
# a 2-layer model of the 2B-4T widths (generated, seed 1), driven by bitnet-loadtest with
# streaming clients at each concurrency in one run, while the server's RSS is sampled every
# second. Writes bench/YYYY-MM-DD-COMMIT-serve-load.{md,json}, then fails (exit 1, saying
# why) if any request failed, if the server's /metrics still shows a sequence, a request or a
# KV block held a few seconds after the last request, or if the server panicked or died.
#
#   scripts/serve-load.sh
#   CONCURRENCY=4 DURATION=5s scripts/serve-load.sh     # a smoke run of the checks
#
# Environment: CONCURRENCY (default 1,8,16), DURATION (per concurrency, default 120s),
# MAX_TOKENS (default 64), THREADS (server threads, default 2), PARALLEL (sequences decoded
# together, default 16), CTX (KV tokens shared by them, default 4096), MODEL (default: the
# generated 2-layer file), JOBS (build jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
concurrency="${CONCURRENCY:-1,8,16}"
duration="${DURATION:-120s}"
max_tokens="${MAX_TOKENS:-64}"
threads="${THREADS:-2}"
parallel="${PARALLEL:-16}"
ctx="${CTX:-4096}"
nice cargo build --release -j "$jobs" -p bitnet-cli -p bitnet-loadtest
bin="${CARGO_TARGET_DIR:-target}/release/bitnet"
loadtest="${CARGO_TARGET_DIR:-target}/release/bitnet-loadtest"
work=target/serve-load
mkdir -p "$work" bench
model="${MODEL:-$work/2b4t-2layers.gguf}"
[ -f "$model" ] || "$bin" gen-model --preset 2b-4t --layers 2 --seed 1 -o "$model"

server=""
sampler=""
cleanup() {
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT

"$bin" serve -m "$model" --port 0 -t "$threads" --parallel "$parallel" -c "$ctx" \
    --queue 64 >"$work/serve.out" 2>"$work/serve.err" &
server=$!
url=""
for _ in $(seq 600); do
    url=$(sed -n 's/^listening on //p' "$work/serve.out" 2>/dev/null || true)
    [ -n "$url" ] && break
    kill -0 "$server" 2>/dev/null || { cat "$work/serve.err" >&2; exit 1; }
    sleep 0.1
done
[ -n "$url" ] || { echo "the server did not start" >&2; cat "$work/serve.err" >&2; exit 1; }
for _ in $(seq 600); do
    curl -sf "$url/health" >/dev/null 2>&1 && break
    sleep 0.1
done
echo "server: $url (pid $server)" >&2

# RSS every second: "seconds_since_start rss_kib".
t0=$(date +%s)
(while kill -0 "$server" 2>/dev/null; do
    echo "$(($(date +%s) - t0)) $(awk '/^VmRSS/ {print $2}' "/proc/$server/status")"
    sleep 1
done) >"$work/rss.txt" &
sampler=$!

fail() {
    echo "serve-load: FAIL: $*" >&2
    exit 1
}

"$loadtest" --url "$url" --concurrency "$concurrency" --duration "$duration" --stream \
    --ignore-eos --max-tokens "$max_tokens" -o json >"$work/load.json" ||
    fail "bitnet-loadtest failed (server log: $work/serve.err)"
# The gauges are published after each engine step, which may end just after the last answer
# went out: give them a few seconds to reach zero before judging.
gauge() {
    sed -n "s/^$1 //p" "$work/metrics.txt"
}
for _ in $(seq 50); do
    curl -sf "$url/metrics" >"$work/metrics.txt" || fail "GET /metrics failed"
    [ "$(gauge bitnet_kv_sequences)" = 0 ] && [ "$(gauge bitnet_requests_processing)" = 0 ] &&
        [ "$(gauge bitnet_kv_cache_usage_ratio)" = 0 ] && break
    sleep 0.2
done
kill "$sampler" 2>/dev/null || true
sampler=""

commit=$(git rev-parse --short HEAD)
stamp="$(date -u +%F)-$commit"
python3 - "$work" "bench/$stamp-serve-load" <<'EOF'
import json, re, sys

work, out = sys.argv[1], sys.argv[2]
load = json.load(open(f"{work}/load.json"))
runs = load
rss = [tuple(map(int, l.split())) for l in open(f"{work}/rss.txt") if len(l.split()) == 2]
metrics = open(f"{work}/metrics.txt").read()

def metric(name):
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", metrics, re.M)
    return float(m.group(1)) if m else None

# A run where every request failed has no latencies (null) and no rate to compare with.
def num(v, spec, scale=1):
    return "-" if v is None else format(v / scale, spec)

def pair(p, spec, scale=1):
    return f"{num(p['p50'], spec, scale)} / {num(p['p99'], spec, scale)}"

# RSS after warm-up: from the end of the first run's first 10 s to the end.
after = [r for t, r in rss if t >= 10] or [r for _, r in rss]
lines = [
    "| clients | requests | errors | req/s | generated t/s | vs 1 client | TTFT p50 / p99 ms | inter-token p50 / p99 ms | end-to-end p50 / p99 s |",
    "|---:|---:|---:|---:|---:|---:|---|---|---|",
]
base = None
for r in runs:
    c = int(r["level"])
    tps = r["tokens_per_s"]
    base = base or tps
    errors = r["requests_failed"]
    lines.append(
        f"| {c} | {r['requests_ok'] + errors} | {errors} | {r['requests_per_s']:.2f} | {tps:.1f} | "
        f"{f'{tps / base:.2f}x' if base else '-'} | {pair(r['ttft_ms'], '.0f')} | "
        f"{pair(r['inter_token_ms'], '.1f')} | {pair(r['e2e_ms'], '.2f', 1000)} |")
summary = {
    "rss_kib_after_warmup_min": min(after) if after else None,
    "rss_kib_after_warmup_max": max(after) if after else None,
    "kv_sequences_at_end": metric("bitnet_kv_sequences"),
    "kv_cache_usage_ratio_at_end": metric("bitnet_kv_cache_usage_ratio"),
    "requests_processing_at_end": metric("bitnet_requests_processing"),
}
lines.append("")
lines.append(
    f"server RSS after warm-up: {summary['rss_kib_after_warmup_min'] / 1024:.1f} to "
    f"{summary['rss_kib_after_warmup_max'] / 1024:.1f} MiB; at the end: "
    f"{summary['kv_sequences_at_end']:.0f} sequences, KV usage {summary['kv_cache_usage_ratio_at_end']:.3f}, "
    f"{summary['requests_processing_at_end']:.0f} requests processing")
open(out + ".md", "w").write("\n".join(lines) + "\n")
json.dump({"runs": runs, "summary": summary, "rss": rss}, open(out + ".json", "w"), indent=1)
print("\n".join(lines))
EOF
{
    echo
    echo "command: \`scripts/serve-load.sh\`: \`bitnet serve -m $model -t $threads --parallel $parallel -c $ctx --queue 64\`, \`bitnet-loadtest --concurrency $concurrency --duration $duration --stream --ignore-eos --max-tokens $max_tokens\`"
    if [ -z "${MODEL:-}" ]; then
        echo "model: 2 layers of the BitNet b1.58 2B-4T widths (\`bitnet gen-model --preset 2b-4t --layers 2 --seed 1\`)"
    fi
    echo "date: $(date -u +%FT%TZ), commit: $commit, cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
} >>"bench/$stamp-serve-load.md"

# The checks, after the record is written so a failed run can still be read; every problem
# is named before the exit.
ok=1
python3 - "$work" <<'EOF' || ok=0
import json, re, sys

work = sys.argv[1]
metrics = open(f"{work}/metrics.txt").read()
problems = []
for r in json.load(open(f"{work}/load.json")):
    if r["requests_failed"]:
        problems.append(f"{r['requests_failed']} failed requests at {r['level']:g} clients: {r['errors']}")
for name in ["bitnet_kv_sequences", "bitnet_requests_processing", "bitnet_kv_cache_usage_ratio"]:
    m = re.search(rf"^{name} ([0-9.eE+-]+)$", metrics, re.M)
    if m is None:
        problems.append(f"/metrics has no {name}")
    elif float(m.group(1)) != 0:
        problems.append(f"{name} is {m.group(1)} at the end, not 0 (something still held)")
for p in problems:
    print(f"serve-load: FAIL: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
if ! kill -0 "$server" 2>/dev/null; then
    echo "serve-load: FAIL: the server died during the run (log: $work/serve.err)" >&2
    ok=0
fi
if grep -n panicked "$work/serve.err" >&2; then
    echo "serve-load: FAIL: the server panicked (above; log: $work/serve.err)" >&2
    ok=0
fi
[ "$ok" = 1 ] || exit 1
echo "serve-load: OK: no failed request, nothing held at the end, no panic" >&2
