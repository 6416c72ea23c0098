#!/usr/bin/env bash
# The precision-plan table (docs/kv-cache.md, "Per-layer formats: bitnet calibrate"):
#   1. `bitnet calibrate` on the shipped trained model, on the start of its training corpus
#      (testdata/text/tinyshakespeare.txt; -c 256, SAMPLES windows), at three KL-divergence
#      budgets (BUDGETS), with the per-layer sensitivity table and the single-pair comparison;
#   2. each plan, f16 and the single K/V pairs on the held-out text
#      (models/shakespeare-ref/heldout.txt, `perplexity -c 256`): perplexity, mean KL
#      divergence and top-1 agreement against the f16 run, and KV bytes a token;
#   3. the same plans' formats laid over the BitNet b1.58 2B-4T shape (30 layers, each takes
#      the format of the shipped model's layer at the same relative depth, scripts/
#      plan-stretch.py): KV bytes a token, pp512 and tg128 on an empty cache (REPS
#      repetitions); peak RSS and decode speed with a 4,096-token context filled (`bench -d`);
#      the KV pool of a 32,768-token context and the peak RSS with it reserved (FILL_32K=1
#      also fills it: about 20 minutes a plan on 2 cores). THREADS threads, one process per
#      plan and step, plans alternated.
#
# Environment: BUDGETS (default "0.0005 0.002 0.01"), SAMPLES (16), REPS (3), THREADS (2),
# JOBS, BIG (the 2B-4T-shaped file; generated if missing), SKIP_BENCH=1 (accuracy only),
# FILL_32K=1 (fill the 32,768-token context too).
# Writes bench/YYYY-MM-DD-COMMIT-plans.md; logs and plans go to target/plan-table/.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
reps="${REPS:-3}"
threads="${THREADS:-2}"
samples="${SAMPLES:-16}"
read -r -a budgets <<<"${BUDGETS:-0.0005 0.002 0.01}"
nice cargo build --release -j "$jobs" -p bitnet-cli
bin="${CARGO_TARGET_DIR:-target}/release/bitnet"
big="${BIG:-models/2b4t-i2_s.gguf}"
small=models/shakespeare.gguf
calib=testdata/text/tinyshakespeare.txt
text=models/shakespeare-ref/heldout.txt
work=target/plan-table
mkdir -p "$work" bench
commit="$(git rev-parse --short HEAD)"
out="bench/$(date -u +%F)-$commit-plans.md"

# 1. Calibrate once per budget (each run measures afresh: the shipped model takes seconds).
for b in "${budgets[@]}"; do
  "$bin" calibrate -m "$small" -f "$calib" -c 256 --samples "$samples" -t "$threads" \
    --max-kld "$b" -o "$work/plan-$b.json" --report "$work/calibrate-$b.md" --compare-uniform \
    >"$work/calibrate-$b.out" 2>"$work/calibrate-$b.log"
done

# 2. Accuracy on the held-out text against the f16 run.
"$bin" perplexity -m "$small" -f "$text" -c 256 -t "$threads" \
  --kl-divergence-base "$work/base.kld" >"$work/ppl-f16.out" 2>/dev/null
ppl_row() { # NAME FLAGS...
  local name="$1"
  shift
  "$bin" perplexity -m "$small" -f "$text" -c 256 -t "$threads" --kl-divergence \
    --kl-divergence-base "$work/base.kld" "$@" >"$work/ppl-$name.out" 2>/dev/null
  local ppl kld top
  ppl="$(grep -o 'PPL = [0-9.]*' "$work/ppl-$name.out" | head -1 | awk '{print $3}')"
  kld="$(grep -o 'Mean KLD: [0-9.]*' "$work/ppl-$name.out" | awk '{print $3}')"
  top="$(grep -o 'same top token: [0-9.]*%' "$work/ppl-$name.out" | awk '{print $4}')"
  echo "$ppl $kld $top"
}
bytes_of() { # PLAN N_KV_HEADS HEAD_DIM
  python3 - "$@" <<'EOF'
import json, sys
row = {"f32": lambda d: 4 * d, "f16": lambda d: 2 * d, "q8_0": lambda d: d // 32 * 34,
       "fp8": lambda d: d // 32 * 34, "q8_r": lambda d: d + 4, "q4_0": lambda d: d // 32 * 18,
       "b1": lambda d: d // 32 * 6}
plan = json.load(open(sys.argv[1]))
heads, d = int(sys.argv[2]), int(sys.argv[3])
print(sum(heads * (row[l["k"]](d) + row[l["v"]](d)) for l in plan["layers"]))
EOF
}
uniform_plan() { # K V LAYERS OUT
  python3 - "$@" <<'EOF'
import json, sys
k, v, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
json.dump({"format": "bitnet-precision-plan", "version": 1, "kv_rotate": "auto",
           "layers": [{"k": k, "v": v, "acts": "int8"}] * n}, open(out, "w"))
EOF
}

{
  echo "# Per-layer precision plans on the shipped model, and their formats on the 2B-4T shape"
  echo
  echo "Commit $commit, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "$threads threads. Command: \`scripts/plan-table.sh\` (BUDGETS=\"${budgets[*]}\" SAMPLES=$samples REPS=$reps)."
  echo
  echo "## Per-layer sensitivity (calibration text: the first $samples windows of 256 tokens of tinyshakespeare.txt)"
  echo
  echo "Mean KL divergence (nats a scored token) from the all-f16, int8 run when only that layer"
  echo "takes the setting, and in brackets the share of tokens whose most likely successor is"
  echo "unchanged ($(grep -o '[0-9]* scored tokens' "$work/calibrate-${budgets[0]}.md" | head -1))."
  echo
  sed -n '/^| layer/,/^$/p' "$work/calibrate-${budgets[0]}.md"
  echo "## Plans"
  echo
  for b in "${budgets[@]}"; do
    echo "- budget $b: $(grep -m1 '^plan (budget' "$work/calibrate-$b.md" | sed 's/^plan (budget [^)]*): //')"
    echo "  $(grep -m1 'KV .* bytes a token' "$work/calibrate-$b.md" | sed 's/^ *//')"
    echo "  $(grep -m1 '^the cheapest single pair\|^no single pair' "$work/calibrate-$b.md")"
  done
  echo
  echo "## Held-out text (models/shakespeare-ref/heldout.txt, perplexity -c 256, KL divergence against f16)"
  echo
  echo "| setting | KV bytes/token (shipped: 4 layers x 2 heads x 64) | PPL | mean KLD | same top-1 |"
  echo "|---|---:|---:|---:|---:|"
  f16ppl="$(grep -o 'PPL = [0-9.]*' "$work/ppl-f16.out" | head -1 | awk '{print $3}')"
  echo "| f16 / f16 (reference) | 2048 | $f16ppl | 0 | 100% |"
  for pair in q8_0/q8_0 q8_0/q4_0 q4_0/q4_0 fp8/fp8; do
    k=${pair%/*} v=${pair#*/}
    uniform_plan "$k" "$v" 4 "$work/uniform-$k-$v.json"
    read -r ppl kld top <<<"$(ppl_row "u-$k-$v" --plan "$work/uniform-$k-$v.json")"
    echo "| $k / $v, every layer | $(bytes_of "$work/uniform-$k-$v.json" 2 64) | $ppl | $kld | $top |"
  done
  for b in "${budgets[@]}"; do
    read -r ppl kld top <<<"$(ppl_row "plan-$b" --plan "$work/plan-$b.json")"
    echo "| plan, budget $b | $(bytes_of "$work/plan-$b.json" 2 64) | $ppl | $kld | $top |"
  done
} >"$out"

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  [ -f "$big" ] || "$bin" gen-model --preset 2b-4t --seed 1 -o "$big"
  names=(f16)
  uniform_plan f16 f16 30 "$work/big-f16.json"
  for b in "${budgets[@]}"; do
    python3 scripts/plan-stretch.py "$work/plan-$b.json" 30 >"$work/big-plan-$b.json"
    names+=("plan-$b")
  done
  fill_32k="${FILL_32K:-0}"
  {
    echo
    echo "## The plans' formats on the 2B-4T shape ($big: 30 layers, 5 KV heads of 128)"
    echo
    echo "Per plan: speed on an empty cache (\`bench -m $big -p 512 -n 128 -r $reps -t $threads -c 4096"
    echo "--plan PLAN\`); the 4,096-token context filled (\`bench ... -c 4096 -d 4032 -p 0 -n 32 -r 1\`:"
    echo "the fill is untimed, then 32 tokens are decoded at that depth), its peak RSS and that"
    echo "speed; and a 32,768-token context: the pool's bytes when full (KV bytes a token x 32,768:"
    echo "the pool is allocated zeroed and its pages are committed as rows are written, which the"
    echo "4,096-token figures check), and the process's peak RSS with the 32,768-token pool"
    echo "reserved after the pp512 and tg128 tests$( [ "$fill_32k" = 1 ] && echo ", then filled (FILL_32K=1: \`-d 32704 -p 0 -n 32\`, on a copy of the file whose metadata allows 32,768 tokens)")."
    echo "Plans alternate within each step. Peak RSS is the process's: weights, KV rows written, buffers."
    echo
    echo "| plan | KV bytes/token | pp512 t/s | tg128 t/s | peak RSS, 4,096 filled | tg32 @ d4032 | KV pool at 32,768 | peak RSS, 32,768 reserved |$( [ "$fill_32k" = 1 ] && echo " peak RSS, 32,768 filled | tg32 @ d32704 |")"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|$( [ "$fill_32k" = 1 ] && echo "---:|---:|")"
  } >>"$out"
  for name in "${names[@]}"; do
    "$bin" bench -m "$big" -p 512 -n 128 -r "$reps" -t "$threads" -c 4096 \
      --plan "$work/big-$name.json" -o json >"$work/bench-$name-empty.json" 2>"$work/bench-$name-empty.log"
  done
  for name in "${names[@]}"; do
    "$bin" bench -m "$big" -p 0 -n 32 -r 1 -t "$threads" -c 4096 -d 4032 \
      --plan "$work/big-$name.json" -o json >"$work/bench-$name-4096.json" 2>"$work/bench-$name-4096.log"
  done
  for name in "${names[@]}"; do
    "$bin" bench -m "$big" -p 512 -n 128 -r 1 -t "$threads" -c 32768 \
      --plan "$work/big-$name.json" -o json >"$work/bench-$name-32768r.json" 2>"$work/bench-$name-32768r.log"
  done
  if [ "$fill_32k" = 1 ]; then
    # The 2B-4T shape was trained for 4,096 tokens and bench refuses a deeper test: a copy
    # whose metadata says 32,768 (same weights; the speed and memory at a depth do not
    # depend on what the model learned). About 20 minutes a plan on 2 cores (the fill's
    # attention grows with the square of the depth).
    long="$work/2b4t-ctx32k.gguf"
    python3 - "$big" "$long" <<'EOF2'
import shutil, struct, sys
src, dst = sys.argv[1:3]
shutil.copyfile(src, dst)
with open(dst, "r+b") as f:
    head = f.read(64 << 20)
    key = b"context_length"
    at = head.find(key)
    assert at > 0 and struct.unpack_from("<I", head, at + len(key))[0] == 4, "u32 context_length"
    f.seek(at + len(key) + 4)
    f.write(struct.pack("<I", 32768))
EOF2
    for name in "${names[@]}"; do
      "$bin" bench -m "$long" -p 0 -n 32 -r 1 -t "$threads" -c 32768 -d 32704 \
        --plan "$work/big-$name.json" -o json >"$work/bench-$name-32768.json" 2>"$work/bench-$name-32768.log"
    done
  fi
  for name in "${names[@]}"; do
    python3 - "$work" "$name" "$(bytes_of "$work/big-$name.json" 5 128)" "$fill_32k" >>"$out" <<'EOF2'
import json, sys
work, name, kv, fill = sys.argv[1:5]
def rows(tag):
    return json.load(open(f"{work}/bench-{name}-{tag}.json"))["rows"]
def rss(r):
    return f"{max(x['peak_rss_bytes'] for x in r) / 2**30:.3f} GiB"
empty = rows("empty")
pp = next(r for r in empty if r["test"] == "pp")
tg = next(r for r in empty if r["test"] == "tg")
filled = rows("4096")
cells = [f"{pp['mean_tps']:.1f} ± {pp['stddev_tps']:.1f}", f"{tg['mean_tps']:.2f} ± {tg['stddev_tps']:.2f}",
         rss(filled), f"{next(x for x in filled if x['test'] == 'tg')['mean_tps']:.2f}",
         f"{int(kv) * 32768 / 2**30:.3f} GiB", rss(rows("32768r"))]
if fill == "1":
    deep = rows("32768")
    cells += [rss(deep), f"{next(x for x in deep if x['test'] == 'tg')['mean_tps']:.2f}"]
print(f"| {name} | {kv} | " + " | ".join(cells) + " |")
EOF2
  done
fi
echo "wrote $out"
