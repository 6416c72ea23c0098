#!/usr/bin/env bash
# The KV cache type table (docs/kv-cache.md, "KV cache types"): per K/V type pair, the bytes a token
# takes per layer and the cache at 4,096 tokens (from `bitnet inspect`), decode speed at
# depth 512 and 4,096 on the BitNet b1.58 2B-4T shape (generated model, seed 1), and the
# perplexity, mean KL divergence and top-1 agreement against the f16 run on the shipped
# trained model's held-out text.
#
#   scripts/kv-table.sh [PAIR ...]        PAIR is K/V[+MOD...], e.g. q8_0/q4_0 or b1/b1+rot
#                                         (default: the table's); MOD: rot (--kv-rotate kv),
#                                         rotk / rotv (one side), xnor (--kv-xnor)
#
# Environment: REPS (bench repetitions, default 3), THREADS (default 2), JOBS (build jobs),
# SKIP_BENCH=1 (accuracy only), BIG (the 2B-4T-shaped file; generated if missing). Writes
# bench/YYYY-MM-DD-COMMIT-kv-types.{md,json}; the per-pair bench reports and perplexity
# logs go to target/kv-table/.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
reps="${REPS:-3}"
threads="${THREADS:-2}"
nice cargo build --release -j "$jobs" -p bitnet-cli
bin="${CARGO_TARGET_DIR:-target}/release/bitnet"
big="${BIG:-models/2b4t-i2_s.gguf}"
small=models/shakespeare.gguf
text=models/shakespeare-ref/heldout.txt
[ -f "$big" ] || "$bin" gen-model --preset 2b-4t --seed 1 -o "$big"
work=target/kv-table
mkdir -p "$work" bench

if [ "$#" -gt 0 ]; then
  pairs=("$@")
else
  pairs=(f16/f16 f32/f32 q8_0/q8_0 q8_r/q8_r fp8/fp8 q4_0/q4_0 q8_0/q4_0 b1/b1 q8_0/b1 b1/q8_0
    q8_0/q8_0+rot q4_0/q4_0+rot b1/b1+rot q8_0/b1+rot b1/q8_0+rot b1/q8_0+xnor b1/q8_0+rot+xnor)
fi

# The K type, the V type, the extra flags and a file tag of a PAIR.
split_pair() {
  local kv=${1%%+*} mods=${1#*+} m
  k=${kv%/*} v=${kv#*/} flags=() tag=${1//\//-}
  tag=${tag//+/-}
  [ "$mods" = "$1" ] && return 0
  for m in ${mods//+/ }; do
    case $m in
      rot) flags+=(--kv-rotate kv) ;;
      rotk) flags+=(--kv-rotate k) ;;
      rotv) flags+=(--kv-rotate v) ;;
      xnor) flags+=(--kv-xnor) ;;
      *) echo "unknown modifier $m in $1" >&2; exit 2 ;;
    esac
  done
}

"$bin" inspect --json -c 4096 "$big" > "$work/inspect.json"

# Accuracy: the f16 run saves its distributions, every pair is compared against them.
ppl=("$bin" perplexity -m "$small" -f "$text" -c 256 -t "$threads")
"${ppl[@]}" --kl-divergence-base "$work/f16.kld" > "$work/ppl-f16-f16.txt" 2>/dev/null
for pair in "${pairs[@]}"; do
  split_pair "$pair"
  "${ppl[@]}" -ctk "$k" -ctv "$v" "${flags[@]}" --kl-divergence-base "$work/f16.kld" \
    --kl-divergence > "$work/ppl-$tag.txt" 2>/dev/null
done

# Speed: decode of 32 tokens after filling 512 and 4,096 tokens of context.
bench=("$bin" bench -m "$big" -p 0 -n 32 -d 512,4096 -t "$threads" -r "$reps" --warmup 1
  --head q8 --no-membw)
if [ -z "${SKIP_BENCH:-}" ]; then
  for pair in "${pairs[@]}"; do
    split_pair "$pair"
    echo "load before $pair: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "${bench[@]}" -ctk "$k" -ctv "$v" "${flags[@]}" --json-report "$work/bench-$tag.json" \
      > /dev/null
  done
fi

commit=$(git rev-parse --short HEAD)
stamp="$(date -u +%F)-$commit"
python3 - "$work" "bench/$stamp-kv-types" "${pairs[@]}" <<'EOF'
import json, os, re, sys

work, out, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
kv = {t["type"]: t for t in json.load(open(f"{work}/inspect.json"))["memory"]["kv_types"]}

def tag_of(pair):
    return pair.replace("/", "-").replace("+", "-")

def ppl_of(pair):
    text = open(f"{work}/ppl-{tag_of(pair)}.txt").read()
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
    kld = re.search(r"Mean KLD: ([0-9.eE+-]+) \+/- ([0-9.eE+-]+) \| same top token: ([0-9.]+)%", text)
    return (float(m.group(1)), float(m.group(2)),
            float(kld.group(1)) if kld else None, float(kld.group(3)) if kld else None)

def tg_of(pair):
    path = f"{work}/bench-{tag_of(pair)}.json"
    if not os.path.exists(path):
        return {}
    rows = json.load(open(path))["rows"]
    return {r.get("n_depth", 0): (r["mean_tps"], r["stddev_tps"]) for r in rows}

base_ppl = ppl_of("f16/f16")[0]
records = []
for pair in pairs:
    kv_pair, *mods = pair.split("+")
    k, v = kv_pair.split("/")
    per_tok = (kv[k]["bytes_per_token_per_layer"] + kv[v]["bytes_per_token_per_layer"]) // 2
    at4k = (kv[k]["kv_bytes"] + kv[v]["kv_bytes"]) // 2
    p, se, kld, top1 = ppl_of(pair)
    tg = tg_of(pair)
    records.append({
        "k": k, "v": v, "mods": " ".join(mods) or "-", "bytes_per_token_per_layer": per_tok, "kv_bytes_4096": at4k,
        "tg_d512": tg.get(512), "tg_d4096": tg.get(4096),
        "ppl": p, "ppl_se": se, "ppl_delta_pct": 100 * (p - base_ppl) / base_ppl,
        "mean_kld": kld, "top1_pct": top1,
    })

def tps(x):
    return f"{x[0]:.2f} ± {x[1]:.2f}" if x else "-"

lines = [
    "| K | V | flags | bytes/token/layer | KV @ 4,096 | tg32 @ d512 | tg32 @ d4096 | PPL | ΔPPL vs f16 | mean KLD | same top-1 |",
    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for r in records:
    kld = "-" if r["mean_kld"] is None else f"{r['mean_kld']:.6f}"
    top = "-" if r["top1_pct"] is None else f"{r['top1_pct']:.2f}%"
    lines.append(
        f"| {r['k']} | {r['v']} | {r['mods']} | {r['bytes_per_token_per_layer']} | "
        f"{r['kv_bytes_4096'] / 2**20:.1f} MiB | {tps(r['tg_d512'])} | {tps(r['tg_d4096'])} | "
        f"{r['ppl']:.4f} ± {r['ppl_se']:.4f} | {r['ppl_delta_pct']:+.2f}% | {kld} | {top} |")
open(out + ".md", "w").write("\n".join(lines) + "\n")
json.dump({"pairs": records}, open(out + ".json", "w"), indent=1)
print("\n".join(lines))
EOF
{
  echo
  echo "bytes: \`$bin inspect --json -c 4096 $big\` (2B-4T shape: 30 layers, 5 KV heads of 128)"
  echo "speed: \`${bench[*]} -ctk K -ctv V\`"
  echo "accuracy: \`${ppl[*]} [-ctk K -ctv V] [--kv-rotate kv] [--kv-xnor] --kl-divergence-base f16.kld [--kl-divergence]\`"
  echo "flags: rot = --kv-rotate kv (rotk/rotv: one side), xnor = --kv-xnor"
  echo "date: $(date -u +%FT%TZ), commit: $commit, cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
} >> "bench/$stamp-kv-types.md"
