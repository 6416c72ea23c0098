#!/usr/bin/env bash
# A/B: two bitnet binaries alternated round by round (which goes first alternates), per kernel
# set (avx2, avxvnni, avx512): pp512, and tg32 at 1 and 8 sequences, 2 threads, --head q8.
# usage: scripts/ab-binaries.sh BASE NEW MODEL ROUNDS OUTCSV
set -euo pipefail
base=$1 new=$2 model=$3 rounds=$4 out=$5
echo "round,bin,kernel,threads,batch,test,tps" > "$out"
run() { # bin label kernel args...
  local bin=$1 label=$2 k=$3; shift 3
  "$bin" bench -m "$model" --kernel "$k" -t 2 -r 1 --warmup 1 --head q8 -o csv --no-membw "$@" 2>/dev/null \
    | tail -n +2 | awk -F, -v r="$round" -v l="$label" '{print r","l","$4","$5","$6","$8","$10}' >> "$out"
}
for round in $(seq 1 "$rounds"); do
  for k in avx2 avxvnni avx512; do
    if [ $((round % 2)) = 1 ]; then order="base new"; else order="new base"; fi
    for who in $order; do
      bin=$base; [ "$who" = new ] && bin=$new
      run "$bin" "$who" "$k" -p 512 -n 0
      run "$bin" "$who" "$k" -p 0 -n 32 -b 1,8
    done
  done
  echo "round $round done $(date -u +%T)" >&2
done
python3 - "$out" <<'PY'
import csv, sys, statistics as st, collections
rows = list(csv.DictReader(open(sys.argv[1])))
d = collections.defaultdict(dict)
for r in rows:
    d[(r['kernel'], r['test'], r['batch'])].setdefault(r['round'], {})[r['bin']] = float(r['tps'])
print("| kernel | test | batch | base t/s (median) | new t/s (median) | new/base per round | median ratio | new faster |")
print("|---|---|---|---|---|---|---|---|")
for key, rs in sorted(d.items()):
    ratios = [v['new']/v['base'] for v in rs.values() if 'new' in v and 'base' in v]
    b = st.median(v['base'] for v in rs.values()); n = st.median(v['new'] for v in rs.values())
    print(f"| {key[0]} | {key[1]} | {key[2]} | {b:.2f} | {n:.2f} | {', '.join(f'{x:.3f}' for x in ratios)} | {st.median(ratios):.3f} | {sum(x>1 for x in ratios)} of {len(ratios)} |")
PY
