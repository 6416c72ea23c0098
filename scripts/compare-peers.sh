#!/usr/bin/env bash
# Our speed and memory beside the peers' (issues 14 and 35), on the same weights, on this
# machine: bitnet.cpp (microsoft/BitNet, I2_S), upstream llama.cpp (ggml-org/llama.cpp, TQ2_0)
# and ik_llama.cpp (ikawrakow/ik_llama.cpp, IQ2_BN: the fastest CPU engine for 1-bit models on
# AVX2). This script only RUNS already built peers; it never fetches or builds them.
#
#   BITNET_CPP_BENCH=.../llama-bench BITNET_CPP_CLI=.../llama-cli BITNET_CPP_SRC=.../BitNet \
#   LLAMA_CPP_BENCH=.../llama-bench  LLAMA_CPP_CLI=.../llama-cli  LLAMA_CPP_SRC=.../llama.cpp \
#   IK_LLAMA_BENCH=.../llama-bench IK_LLAMA_CLI=.../llama-cli IK_LLAMA_QUANTIZE=.../llama-quantize \
#   IK_LLAMA_SRC=.../ik_llama.cpp ROUNDS=3 scripts/compare-peers.sh
#
# How the peers must be built (release builds, native CPU flags, outside this repository):
#  - bitnet.cpp: github.com/microsoft/BitNet with its 3rdparty/llama.cpp submodule (the fork
#    github.com/Eddie-Wang1120/llama.cpp) at the commit the BitNet commit pins (`git ls-tree
#    HEAD 3rdparty/llama.cpp`). First the code generation step its setup_env.py runs for
#    BitNet-b1.58-2B-4T on x86: `python utils/codegen_tl2.py --model bitnet_b1_58-3B
#    --BM 160,320,320 --BK 96,96,96 --bm 32,32,32` (it writes include/bitnet-lut-kernels.h,
#    which src/ggml-bitnet-lut.cpp includes in every build). Then CMake for the I2_S path only:
#    `cmake -B build -DCMAKE_BUILD_TYPE=Release -DBITNET_X86_TL2=OFF` (GGML_NATIVE is on by
#    default: -march=native) and build the targets llama-bench and llama-cli.
#  - llama.cpp: github.com/ggml-org/llama.cpp, `cmake -B build -DCMAKE_BUILD_TYPE=Release
#    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF`, targets llama-bench and llama-cli.
#  - ik_llama.cpp: github.com/ikawrakow/ik_llama.cpp, `cmake -B build -DCMAKE_BUILD_TYPE=Release
#    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DGGML_IQK_FA_ALL_QUANTS=OFF` (the flash-attention
#    kernels for every quant type take most of its build and serve none of these runs),
#    targets llama-bench, llama-cli and llama-quantize (it makes the IQ2_BN file, below).
#  For the AVX2 comparison on a CPU that has AVX-512 (issue 35), build every peer with
#  `-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#  -DGGML_AVX512=OFF` and run ours with KERNEL=avx2.
#  The commits and compilers of the last recorded run are in bench/*-peers-build.md.
#
# The files (made with our `gen-model` when missing, seed 1, 2B-4T shapes, tied Q8_0
# embedding/head so that every engine computes the head with 8-bit weights):
#  - bitnet.cpp and ours: I2_S projections, arch bitnet-b1.58 (relu2 FFN).
#  - llama.cpp and ours: TQ2_0 projections. llama.cpp knows no `bitnet-b1.58` architecture
#    (only `bitnet`, the SiLU-gated 1bitLLM one), so that file is the TQ2_0 one with its
#    architecture renamed to `bitnet` (same tensors, byte for byte): both engines then run
#    a SiLU FFN instead of relu2, which costs the same.
#  - ik_llama.cpp: IQ2_BN (its 2-bit ternary type, one scale a row), quantized by its own
#    llama-quantize from the float-weight file `gen-model --weight-type f16` writes with the
#    same seed and shapes (4.2 GiB, deleted once quantized), embedding/head kept Q8_0. It
#    knows `bitnet-b1.58`. Ours cannot read IQ2_BN: beside ik_llama.cpp ours runs the I2_S
#    file, the same ternary weights in bitnet.cpp's layout. ik_llama.cpp's bench runs with
#    IK_LLAMA_ARGS (default `-rtr 1`: its run-time repack to IQ2_BN_R4, its best setting
#    for prompt processing; `-rtr 0` keeps the file's layout), its llama-cli with
#    IK_LLAMA_CLI_ARGS (default `-rtr`, the same repack: there it is a flag without value).
#
# Each engine's recommended configuration (issue 50), beside the same-file runs above
# (SETUPS, default `same recommended`):
#  - bitnet.cpp: I2_S with a Q6_K token embedding, made by its own llama-quantize
#    (`--token-embedding-type Q6_K SRC DST I2_S 1`). One thread on purpose: with the rows
#    split over threads its I2_S quantizer writes each tensor's scale in the middle of the
#    buffer, and the file decodes garbage.
#  - ik_llama.cpp: IQ2_BN and IQ1_BN (1.625 bits a weight), Q6_K embedding and head, by its
#    llama-quantize, run with IK_LLAMA_ARGS (`-rtr 1`).
#  - ours: its defaults (`--head auto`) on OURS_REC_MODEL (default: bitnet.cpp's recommended
#    file above: ours reads its Q6_K embedding; ours cannot read IQ2_BN or IQ1_BN).
#  All three come from one float-weight file (`gen-model --weight-type f16`, seed 1, 4.5 GiB,
#  deleted once they are made).
#
# Each round runs, for each peer: ours then the peer (the order alternates every round), on
# the peer's file with THREADS threads: the bench (pp PP and tg TG, REPS repetitions after one
# warm-up each) and a short generation (GEN_TOKENS tokens at a CTX-token context, greedy,
# under /usr/bin/time -v) for the peak RSS and the warm load time (the file is read into the
# page cache first). The load time is each engine's own figure: ours is `load` of
# `bitnet generate`; llama.cpp's `load time` runs from the start of the model load to the end
# of its first decode (the warm-up run). The wall time of the whole short run is shown too.
#
# Environment:
#   BITNET            our binary (default target/release/bitnet); BITNET_COMMIT its commit
#                     (default: HEAD of the checkout the binary lies in, if any)
#   BITNET_CPP_BENCH  bitnet.cpp's llama-bench; unset: bitnet.cpp is skipped
#   BITNET_CPP_CLI    bitnet.cpp's llama-cli (memory and load rows; unset: those are skipped)
#   BITNET_CPP_SRC    its source tree (for the commits), or BITNET_CPP_COMMIT
#   LLAMA_CPP_BENCH, LLAMA_CPP_CLI, LLAMA_CPP_SRC or LLAMA_CPP_COMMIT: the same for llama.cpp
#   IK_LLAMA_BENCH, IK_LLAMA_CLI, IK_LLAMA_SRC or IK_LLAMA_COMMIT: the same for ik_llama.cpp;
#                     IK_LLAMA_QUANTIZE its llama-quantize (needed only to make IQ2BN_MODEL);
#                     IK_LLAMA_ARGS its extra bench flags (default `-rtr 1`), IK_LLAMA_CLI_ARGS
#                     its extra llama-cli flags (default `-rtr`)
#   KERNELS           our kernel sets, comma-separated (`--kernel`, e.g. avx2,avxvnni,avx512):
#                     the bench runs each, repetitions interleaved, one row a set; the short
#                     generation runs the first (default: the best this CPU has; KERNEL is
#                     the old name)
#   SETUPS            `same`, `recommended` or both (default `same recommended`)
#   BITNET_CPP_QUANTIZE its llama-quantize (needed only to make REC_I2S_MODEL);
#                     BITNET_CPP_ARGS its extra bench flags (default none)
#   REC_I2S_MODEL, IQ2BN_Q6K_MODEL, IQ1BN_Q6K_MODEL, OURS_REC_MODEL: the recommended files
#   ROUNDS (3), REPS (3), THREADS (2), PP (512), TG (128), CTX (4096), GEN_TOKENS (16)
#   MODELS_DIR (models/peers), I2S_MODEL, TQ2_MODEL, IQ2BN_MODEL (the files; made there when
#                     missing)
#   OUT_DIR (target/compare-peers/DATE): raw outputs and report.md
# Prints the report (markdown) on stdout. Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${BITNET:-${CARGO_TARGET_DIR:-target}/release/bitnet}"
rounds="${ROUNDS:-3}"
reps="${REPS:-3}"
threads="${THREADS:-2}"
pp="${PP:-512}"
tg="${TG:-128}"
ctx="${CTX:-4096}"
gen="${GEN_TOKENS:-16}"
models_dir="${MODELS_DIR:-models/peers}"
i2s_model="${I2S_MODEL:-$models_dir/2b4t-i2_s-q8.gguf}"
tq2_model="${TQ2_MODEL:-$models_dir/2b4t-tq2_0-q8-arch-bitnet.gguf}"
iq2bn_model="${IQ2BN_MODEL:-$models_dir/2b4t-iq2_bn-q8.gguf}"
ik_args="${IK_LLAMA_ARGS--rtr 1}"
ik_cli_args="${IK_LLAMA_CLI_ARGS--rtr}"
kernels="${KERNELS:-${KERNEL:-}}"
kernel_args=() first_kernel_args=()
if [ -n "$kernels" ]; then
  kernel_args=(--kernel "$kernels")
  first_kernel_args=(--kernel "${kernels%%,*}")
fi
setups="${SETUPS:-same recommended}"
rec_i2s_model="${REC_I2S_MODEL:-$models_dir/2b4t-i2_s-q6k-bitnetcpp.gguf}"
iq2bn_q6k_model="${IQ2BN_Q6K_MODEL:-$models_dir/2b4t-iq2_bn-q6k.gguf}"
iq1bn_q6k_model="${IQ1BN_Q6K_MODEL:-$models_dir/2b4t-iq1_bn-q6k.gguf}"
ours_rec_model="${OURS_REC_MODEL:-$rec_i2s_model}"
bc_args="${BITNET_CPP_ARGS:-}"
out="${OUT_DIR:-target/compare-peers/$(date -u +%Y%m%dT%H%M%SZ)}"
prompt="The quick brown fox jumps over the lazy dog"

say() { echo "compare-peers: $*" >&2; }
die() { say "$*"; exit 1; }
[ -x "$bin" ] || die "our binary $bin is missing (build it, or set BITNET)"
command -v python3 > /dev/null || die "python3 is needed to read the results"
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is needed for the peak RSS"
mkdir -p "$out" "$models_dir"

# The peers that are given: name, bench, cli, model, commit.
peers=()
commit_of() { # SRC [submodule path]
  local c
  c=$(git -C "$1" rev-parse HEAD 2> /dev/null) || { echo "?"; return; }
  if [ -n "${2:-}" ] && git -C "$1/$2" rev-parse HEAD > /dev/null 2>&1; then
    c="$c (with $2 at $(git -C "$1/$2" rev-parse HEAD))"
  fi
  echo "$c"
}
if [ -n "${BITNET_CPP_BENCH:-}" ]; then
  [ -x "$BITNET_CPP_BENCH" ] || die "BITNET_CPP_BENCH=$BITNET_CPP_BENCH is not executable"
  bc_commit="${BITNET_CPP_COMMIT:-$( [ -n "${BITNET_CPP_SRC:-}" ] && commit_of "$BITNET_CPP_SRC" 3rdparty/llama.cpp || echo "?")}"
  peers+=("bitnet.cpp")
else
  say "BITNET_CPP_BENCH is not set: bitnet.cpp skipped"
fi
if [ -n "${LLAMA_CPP_BENCH:-}" ]; then
  [ -x "$LLAMA_CPP_BENCH" ] || die "LLAMA_CPP_BENCH=$LLAMA_CPP_BENCH is not executable"
  lc_commit="${LLAMA_CPP_COMMIT:-$( [ -n "${LLAMA_CPP_SRC:-}" ] && commit_of "$LLAMA_CPP_SRC" || echo "?")}"
  peers+=("llama.cpp")
else
  say "LLAMA_CPP_BENCH is not set: llama.cpp skipped"
fi
if [ -n "${IK_LLAMA_BENCH:-}" ]; then
  [ -x "$IK_LLAMA_BENCH" ] || die "IK_LLAMA_BENCH=$IK_LLAMA_BENCH is not executable"
  ik_commit="${IK_LLAMA_COMMIT:-$( [ -n "${IK_LLAMA_SRC:-}" ] && commit_of "$IK_LLAMA_SRC" || echo "?")}"
  peers+=("ik_llama.cpp")
else
  say "IK_LLAMA_BENCH is not set: ik_llama.cpp skipped"
fi
# A target is an engine, or ENGINE@CONFIG for its recommended configuration.
same=0 rec=0
case " $setups " in *" same "*) same=1 ;; esac
case " $setups " in *" recommended "*) rec=1 ;; esac
[ $same = 1 ] || [ $rec = 1 ] || die "SETUPS=$setups names neither same nor recommended"
targets=()
for p in "${peers[@]}"; do
  [ $same = 1 ] && targets+=("$p")
  if [ $rec = 1 ]; then
    case "$p" in
      bitnet.cpp) targets+=("bitnet.cpp@rec") ;;
      ik_llama.cpp) targets+=("ik_llama.cpp@iq2bn" "ik_llama.cpp@iq1bn") ;;
    esac
  fi
done
peer_bench() {
  case "${1%%@*}" in
    bitnet.cpp) echo "$BITNET_CPP_BENCH" ;; llama.cpp) echo "$LLAMA_CPP_BENCH" ;;
    ik_llama.cpp) echo "$IK_LLAMA_BENCH" ;;
  esac
}
peer_cli() {
  case "${1%%@*}" in
    bitnet.cpp) echo "${BITNET_CPP_CLI:-}" ;; llama.cpp) echo "${LLAMA_CPP_CLI:-}" ;;
    ik_llama.cpp) echo "${IK_LLAMA_CLI:-}" ;;
  esac
}
peer_model() {
  case "$1" in
    llama.cpp) echo "$tq2_model" ;; ik_llama.cpp) echo "$iq2bn_model" ;;
    bitnet.cpp@rec) echo "$rec_i2s_model" ;; ik_llama.cpp@iq2bn) echo "$iq2bn_q6k_model" ;;
    ik_llama.cpp@iq1bn) echo "$iq1bn_q6k_model" ;; *) echo "$i2s_model" ;;
  esac
}
# The file ours runs beside a peer: the peer's own, or (IQ2_BN, which ours cannot read) I2_S;
# beside a recommended configuration, ours' own recommended file.
ours_model() {
  case "$1" in *@*) echo "$ours_rec_model" ;; ik_llama.cpp) echo "$i2s_model" ;; *) peer_model "$1" ;; esac
}
# Ours' head: the same 8-bit head as the peer beside the same file; its default otherwise.
ours_head() { case "$1" in *@*) echo auto ;; *) echo q8 ;; esac; }
# A peer's own flags for its bench and its llama-cli (word-split on purpose).
peer_args() { case "${1%%@*}" in ik_llama.cpp) echo "$ik_args" ;; bitnet.cpp) echo "$bc_args" ;; esac; }
peer_cli_args() { case "${1%%@*}" in ik_llama.cpp) echo "$ik_cli_args" ;; esac; }
peer_commit() {
  case "${1%%@*}" in bitnet.cpp) echo "$bc_commit" ;; llama.cpp) echo "$lc_commit" ;; ik_llama.cpp) echo "$ik_commit" ;; esac
}

# The files.
rename_arch() { # SRC DST OLD NEW: a copy of a GGUF file with another architecture name
  python3 - "$@" << 'EOF'
import os, shutil, struct, sys
src, dst, old, new = sys.argv[1:5]
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
with open(src, 'rb') as f:
    magic, ver, n_tensors, n_kv = struct.unpack('<4sIQQ', f.read(24))
    assert magic == b'GGUF' and ver >= 2, 'not a GGUF v2+ file'
    def rstr():
        n, = struct.unpack('<Q', f.read(8))
        return f.read(n)
    def skip(t):
        if t in SIZES:
            f.seek(SIZES[t], 1)
        elif t == 8:
            rstr()
        elif t == 9:
            et, n = struct.unpack('<IQ', f.read(12))
            if et in SIZES:
                f.seek(SIZES[et] * n, 1)
            else:
                for _ in range(n):
                    skip(et)
        else:
            raise SystemExit(f'unknown GGUF value type {t}')
    kvs, align, renamed = [], 32, False
    for _ in range(n_kv):
        key = rstr().decode()
        t, = struct.unpack('<I', f.read(4))
        at = f.tell(); skip(t); end = f.tell(); f.seek(at)
        raw = f.read(end - at)
        if key == 'general.alignment':
            align, = struct.unpack('<I', raw)
        if key == 'general.architecture':
            assert raw[8:].decode() == old, f'the architecture is {raw[8:].decode()!r}, not {old!r}'
            raw, renamed = struct.pack('<Q', len(new)) + new.encode(), True
        if key.startswith(old + '.'):
            key = new + key[len(old):]
        kvs.append((key.encode(), t, raw))
    assert renamed, 'no general.architecture'
    at = f.tell()
    for _ in range(n_tensors):
        rstr()
        n_dims, = struct.unpack('<I', f.read(4))
        f.seek(8 * n_dims + 12, 1)
    end = f.tell(); f.seek(at); infos = f.read(end - at)
    data = -(-end // align) * align
    head = bytearray(struct.pack('<4sIQQ', magic, ver, n_tensors, n_kv))
    for k, t, raw in kvs:
        head += struct.pack('<Q', len(k)) + k + struct.pack('<I', t) + raw
    head += infos
    head += b'\0' * (-len(head) % align)
    with open(dst + '.tmp', 'wb') as g:
        g.write(head)
        f.seek(data)
        shutil.copyfileobj(f, g, 1 << 24)
    os.replace(dst + '.tmp', dst)
EOF
}
want_i2s=0 want_tq2=0 want_iq2bn=0
for p in "${targets[@]}"; do
  case "$p" in bitnet.cpp) want_i2s=1 ;; llama.cpp) want_tq2=1 ;; ik_llama.cpp) want_i2s=1 want_iq2bn=1 ;; esac
done
[ ${#targets[@]} -gt 0 ] || want_i2s=1
if [ $want_i2s = 1 ] && [ ! -f "$i2s_model" ]; then
  say "making $i2s_model"
  "$bin" gen-model --preset 2b-4t --seed 1 --embd-type q8_0 -o "$i2s_model" > /dev/null 2>&1
fi
if [ $want_tq2 = 1 ] && [ ! -f "$tq2_model" ]; then
  say "making $tq2_model"
  "$bin" gen-model --preset 2b-4t --seed 1 --embd-type q8_0 --weight-type tq2_0 \
    -o "$tq2_model.src" > /dev/null 2>&1
  rename_arch "$tq2_model.src" "$tq2_model" bitnet-b1.58 bitnet
  rm -f "$tq2_model.src"
fi
if [ $want_iq2bn = 1 ] && [ ! -f "$iq2bn_model" ]; then
  [ -x "${IK_LLAMA_QUANTIZE:-}" ] || die "$iq2bn_model is missing: set IK_LLAMA_QUANTIZE to make it"
  say "making $iq2bn_model (from a 4.2 GiB float-weight file, deleted after)"
  "$bin" gen-model --preset 2b-4t --seed 1 --embd-type q8_0 --weight-type f16 \
    -o "$iq2bn_model.f16" > /dev/null 2>&1
  # Paths, not bare names: its llama-quantize reads an argument that starts with a digit
  # as the quantization type.
  "$IK_LLAMA_QUANTIZE" --token-embedding-type q8_0 --output-tensor-type q8_0 \
    "$(realpath "$iq2bn_model.f16")" "$(realpath -m "$iq2bn_model")" IQ2_BN "$threads" \
    > "$out/ik-quantize.log" 2>&1 || die "ik_llama.cpp's llama-quantize failed (see $out/ik-quantize.log)"
  rm -f "$iq2bn_model.f16"
fi
# The recommended files, from one float-weight file.
rec_f16="$models_dir/2b4t-f16.gguf.tmp"
need_rec_file() { # TARGET FILE
  for t in "${targets[@]}"; do [ "$t" = "$1" ] && [ ! -f "$2" ] && return 0; done
  return 1
}
make_rec_f16() {
  [ -f "$rec_f16" ] && return
  say "making $rec_f16 (the float weights the recommended files are quantized from)"
  "$bin" gen-model --preset 2b-4t --seed 1 --embd-type f16 --weight-type f16 -o "$rec_f16" \
    > /dev/null 2>&1
}
if need_rec_file bitnet.cpp@rec "$rec_i2s_model"; then
  [ -x "${BITNET_CPP_QUANTIZE:-}" ] || die "$rec_i2s_model is missing: set BITNET_CPP_QUANTIZE to make it"
  make_rec_f16
  say "making $rec_i2s_model (bitnet.cpp's llama-quantize, one thread)"
  "$BITNET_CPP_QUANTIZE" --token-embedding-type Q6_K "$(realpath "$rec_f16")" \
    "$(realpath -m "$rec_i2s_model")" I2_S 1 > "$out/bitnet-cpp-quantize.log" 2>&1 ||
    die "bitnet.cpp's llama-quantize failed (see $out/bitnet-cpp-quantize.log)"
fi
for pair in "ik_llama.cpp@iq2bn IQ2_BN $iq2bn_q6k_model" "ik_llama.cpp@iq1bn IQ1_BN $iq1bn_q6k_model"; do
  read -r t type file <<< "$pair"
  need_rec_file "$t" "$file" || continue
  [ -x "${IK_LLAMA_QUANTIZE:-}" ] || die "$file is missing: set IK_LLAMA_QUANTIZE to make it"
  make_rec_f16
  say "making $file (ik_llama.cpp's llama-quantize, $type, Q6_K embedding and head)"
  "$IK_LLAMA_QUANTIZE" --token-embedding-type q6_k --output-tensor-type q6_k \
    "$(realpath "$rec_f16")" "$(realpath -m "$file")" "$type" "$threads" \
    > "$out/ik-quantize-$type.log" 2>&1 || die "ik_llama.cpp's llama-quantize failed (see $out/ik-quantize-$type.log)"
done
rm -f "$rec_f16"
if [ $rec = 1 ] && [ ! -f "$ours_rec_model" ]; then
  die "OURS_REC_MODEL=$ours_rec_model is missing (it defaults to bitnet.cpp's recommended file)"
fi
# The plain read loop the decode rows are measured against (a separate buffer, all threads).
membw_line=$("$bin" bench --membw -t "$threads" 2>&1 | grep -m1 'measured read bandwidth' || true)

# One engine's runs. Every command goes to commands.txt as it is run.
log_cmd() { { printf '%q ' "$@"; echo; } >> "$out/commands.txt"; }
run_bench() { # ENGINE PEER ROUND: writes $out/bench-ROUND-PEER-ENGINE.json
  local engine=$1 peer=$2 r=$3 model dst
  dst="$out/bench-$r-$peer-$engine.json"
  if [ "$engine" = ours ]; then
    model=$(ours_model "$peer")
    local cmd=("$bin" bench -m "$model" -p "$pp" -n "$tg" -t "$threads" -r "$reps" --warmup 1
      --head "$(ours_head "$peer")" --no-membw "${kernel_args[@]}" -o json)
  else
    model=$(peer_model "$peer")
    # shellcheck disable=SC2046
    local cmd=("$(peer_bench "$peer")" -m "$model" -p "$pp" -n "$tg" -t "$threads" -r "$reps"
      $(peer_args "$peer") -o json)
  fi
  log_cmd "${cmd[@]}"
  "${cmd[@]}" > "$dst" 2> "$dst.err" || { say "failed: ${cmd[*]} (see $dst.err)"; rm -f "$dst"; }
}
run_gen() { # ENGINE PEER ROUND: writes $out/gen-ROUND-PEER-ENGINE.log (engine output + time -v)
  local engine=$1 peer=$2 r=$3 model dst cli
  dst="$out/gen-$r-$peer-$engine.log"
  if [ "$engine" = ours ]; then
    model=$(ours_model "$peer")
    local cmd=("$bin" generate -m "$model" -p "$prompt" -n "$gen" -c "$ctx" -t "$threads"
      --greedy --ignore-eos --head "$(ours_head "$peer")" "${first_kernel_args[@]}")
  else
    model=$(peer_model "$peer")
    cli=$(peer_cli "$peer")
    [ -n "$cli" ] || return 0
    # shellcheck disable=SC2046
    local cmd=("$cli" -m "$model" -p "$prompt" -n "$gen" -c "$ctx" -t "$threads" --temp 0
      --ignore-eos $(peer_cli_args "$peer"))
    # Newer llama-cli starts a conversation unless told not to; older ones lack the flag.
    if "$cli" --help 2>&1 | grep -q -- '-no-cnv'; then cmd+=(-no-cnv); fi
  fi
  log_cmd /usr/bin/time -v "${cmd[@]}"
  /usr/bin/time -v "${cmd[@]}" < /dev/null > "$dst" 2>&1 || say "failed: ${cmd[*]} (see $dst)"
  # Older llama-cli (bitnet.cpp's, ik_llama.cpp's) writes main.log into its working directory,
  # this repository's root: keep it with the run's outputs instead.
  if [ "$engine" != ours ] && [ -f main.log ]; then mv main.log "$dst.main.log"; fi
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
say "writing to $out; peers: ${peers[*]:-none}; $rounds rounds"
: > "$out/commands.txt"
[ ${#targets[@]} -gt 0 ] || targets=(none)
for r in $(seq 1 "$rounds"); do
  for p in "${targets[@]}"; do
    cat "$(peer_model "$p")" "$(ours_model "$p")" > /dev/null # warm: the files in the page cache
    if [ "$p" = none ]; then
      run_bench ours none "$r"; run_gen ours none "$r"; continue
    fi
    # ours, peer, ours, peer ... with the first one alternating between rounds.
    if [ $((r % 2)) = 1 ]; then order=(ours peer); else order=(peer ours); fi
    for e in "${order[@]}"; do say "round $r/$rounds: $e beside $p (bench)"; run_bench "$e" "$p" "$r"; done
    for e in "${order[@]}"; do say "round $r/$rounds: $e beside $p (short generation)"; run_gen "$e" "$p" "$r"; done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# The report.
{
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
  simd=$(grep -m1 -o -w 'avx512f' /proc/cpuinfo || grep -m1 -o -w 'avx2' /proc/cpuinfo || echo "no avx2")
  echo "# Ours beside the peers: pp$pp and tg$tg, $threads threads"
  echo
  echo "- date: $(date -u +%FT%TZ); cpu: $cpu, $(nproc) logical cpus, widest SIMD: $simd"
  echo "- load average (1, 5, 15 min) before: $load_before; after: $load_after"
  if awk -v l="${load_before%% *}" 'BEGIN { exit !(l > 0.5) }'; then
    echo "- **the machine was not idle when this began (1-min load $(echo "$load_before" | cut -d' ' -f1)): the figures are not a measurement**"
  fi
  echo "- plain read loop (ours' probe): ${membw_line:-not measured}"
  echo "- ours: $bin ($("$bin" --version 2>/dev/null)), kernels ${kernels:-the best available}, commit ${BITNET_COMMIT:-$(git -C "$(dirname "$bin")" rev-parse HEAD 2>/dev/null || echo "? (set BITNET_COMMIT)")}"
  for p in "${peers[@]}"; do
    c=$(peer_cli "$p")
    echo "- $p: $(peer_bench "$p") and ${c:-no llama-cli (memory and load skipped)}; commit $(peer_commit "$p")"
  done
  echo "- $rounds rounds; each: ours and the peer one after the other on the peer's file (I2_S for ours beside ik_llama.cpp; first one alternating), bench -r $reps after 1 warm-up"
  [ $rec = 1 ] && echo "- recommended configurations (ENGINE@CONFIG rows): ours runs its defaults (\`--head auto\`) on \`$(basename "$ours_rec_model")\`"
  [ -n "$bc_args" ] && echo "- bitnet.cpp flags: bench $bc_args"
  [ -n "${IK_LLAMA_BENCH:-}" ] && echo "- ik_llama.cpp flags: bench ${ik_args:-none}, llama-cli ${ik_cli_args:-none}"
  echo
} > "$out/report.md"
ROUNDS="$rounds" PP="$pp" TG="$tg" CTX="$ctx" GEN="$gen" I2S="$i2s_model" TQ2="$tq2_model" \
IQ2BN="$iq2bn_model" REC_I2S="$rec_i2s_model" IQ2BN_Q6K="$iq2bn_q6k_model" \
IQ1BN_Q6K="$iq1bn_q6k_model" OURS_REC="$ours_rec_model" \
python3 - "$out" "${targets[@]}" >> "$out/report.md" << 'EOF'
import glob, json, os, re, statistics, sys
out, targets = sys.argv[1], sys.argv[2:]
rounds = int(os.environ['ROUNDS'])
files = {'bitnet.cpp': os.environ['I2S'], 'llama.cpp': os.environ['TQ2'], 'none': os.environ['I2S'],
         'ik_llama.cpp': os.environ['IQ2BN'], 'bitnet.cpp@rec': os.environ['REC_I2S'],
         'ik_llama.cpp@iq2bn': os.environ['IQ2BN_Q6K'], 'ik_llama.cpp@iq1bn': os.environ['IQ1BN_Q6K']}
weights = {'bitnet.cpp': 'I2_S, Q8_0 head', 'llama.cpp': 'TQ2_0 (arch bitnet), Q8_0 head',
           'none': 'I2_S, Q8_0 head', 'ik_llama.cpp': 'IQ2_BN, Q8_0 head',
           'bitnet.cpp@rec': 'I2_S, Q6_K embedding', 'ik_llama.cpp@iq2bn': 'IQ2_BN, Q6_K head',
           'ik_llama.cpp@iq1bn': 'IQ1_BN, Q6_K head'}
# What ours ran beside each target (ours cannot read IQ2_BN: the I2_S file, same weights;
# beside a recommended configuration, ours' own recommended file with its default head).
ours_files = dict(files, **{'ik_llama.cpp': os.environ['I2S']})
ours_weights = dict(weights, **{'ik_llama.cpp': 'I2_S, Q8_0 head'})
for t in files:
    if '@' in t:
        ours_files[t] = os.environ['OURS_REC']
        ours_weights[t] = 'defaults (--head auto)'
tests = [('pp', int(os.environ['PP'])), ('tg', int(os.environ['TG']))]

def bench_samples(path, engine):
    """{(test, n): [t/s, ...]} of one bench JSON output."""
    res = {}
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        return res
    if engine == 'ours':
        for row in d['rows']:
            key = (row['test'], row['n_tokens'], row['kernel'])
            res.setdefault(key, []).extend(row['samples'])
            if row.get('bound_share') is not None:
                res.setdefault(key + ('bound_share',), []).append(row['bound_share'])
            if row.get('read_share_paired') is not None:
                res.setdefault(key + ('paired',), []).append(row['read_share_paired'])
    else:
        for t in d:
            key = ('pp', t['n_prompt']) if t['n_prompt'] > 0 else ('tg', t['n_gen'])
            res.setdefault(key + ('',), []).extend(t.get('samples_ts') or [t['avg_ts']])
    return res

def gen_figures(path, engine):
    try:
        text = open(path, errors='replace').read()
    except OSError:
        return None
    rss = re.search(r'Maximum resident set size \(kbytes\): (\d+)', text)
    wall = re.search(r'Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)', text)
    if engine == 'ours':
        load = re.search(r'\bload ([\d.]+)s\b', text)
        load_ms = float(load.group(1)) * 1000 if load else None
    else:
        load = re.search(r'load time =\s*([\d.]+) ms', text)
        load_ms = float(load.group(1)) if load else None
    status = re.search(r'Exit status: (\d+)', text)
    if not rss or (status and status.group(1) != '0'):
        return None
    w = None
    if wall:
        h, m, s = wall.groups()
        w = int(h or 0) * 3600 + int(m) * 60 + float(s)
    return int(rss.group(1)) * 1024, load_ms, w

def stat(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return statistics.median(xs), min(xs), max(xs), len(xs)

def fmt(s, unit=''):
    if s is None:
        return '-', '-', '0'
    med, lo, hi, n = s
    spread = f'{lo:.2f} - {hi:.2f}{unit} ({(hi - lo) / med * 100:.0f}%)' if med else '-'
    return f'{med:.2f}{unit}', spread, str(n)

print('Throughput: tokens per second over all repetitions of all rounds; ours/peer > 1: ours faster.')
print('"of read": ours\' decode against an in-place plain read of the bytes a token streams, on')
print('the same threads (`read_gbs` of its bench; median over the rounds): the mean against the best')
print('read of the round, and in brackets each repetition against the read just before it (its')
print('`read_share_paired`), which a host whose bandwidth drifts between repetitions does not skew.')
print()
print('| engine | weights | test | t/s median | spread (min - max) | samples | of read | ours/peer |')
print('| ------ | ------- | ---- | ---------: | ------------------ | ------: | ------: | --------: |')
for p in targets:
    per = {}
    for e in ('ours', 'peer'):
        acc = {}
        for r in range(1, rounds + 1):
            for k, v in bench_samples(f'{out}/bench-{r}-{p}-{e}.json', e).items():
                acc.setdefault(k, []).extend(v)
        per[e] = acc
    kernels = sorted({k[2] for k in per['ours'] if len(k) == 3})
    for t, n in tests:
        sp = stat(per['peer'].get((t, n, ''), []))
        name = os.path.basename(files[p])
        ours_name = os.path.basename(ours_files[p])
        for kern in kernels:
            so = stat(per['ours'].get((t, n, kern), []))
            share = stat(per['ours'].get((t, n, kern, 'bound_share'), []))
            paired = stat(per['ours'].get((t, n, kern, 'paired'), []))
            of_read = f'{share[0] * 100:.0f}%' if share and t == 'tg' else ''
            if paired and t == 'tg':
                of_read += f' ({paired[0] * 100:.0f}%)'
            ratio = f'{so[0] / sp[0]:.2f}' if so and sp and p != 'none' else ''
            print(f'| ours ({kern}) | {ours_weights[p]} `{ours_name}` | {t}{n} | ' + ' | '.join(fmt(so))
                  + f' | {of_read} | {ratio} |')
        if p != 'none':
            print(f'| {p} | {weights[p]} `{name}` | {t}{n} | ' + ' | '.join(fmt(sp)) + ' | | |')
print()
print(f"Short generation ({os.environ['GEN']} tokens, greedy, -c {os.environ['CTX']}), medians over the rounds; "
      "ours/peer < 1: ours smaller or faster to load:")
print()
print('| engine | weights | peak RSS | load (own figure) | wall of the run | runs | RSS ours/peer | load ours/peer |')
print('| ------ | ------- | -------: | ----------------: | --------------: | ---: | ------------: | -------------: |')
for p in targets:
    figs = {}
    for e in ('ours', 'peer'):
        g = [gen_figures(f'{out}/gen-{r}-{p}-{e}.log', e) for r in range(1, rounds + 1)]
        g = [x for x in g if x]
        figs[e] = (stat([x[0] for x in g]), stat([x[1] for x in g]), stat([x[2] for x in g]), len(g))
    def row(engine, f, ratios=''):
        rss, load, wall, n = f
        rs = f'{rss[0] / 2**20:.0f} MiB' if rss else '-'
        ls = f'{load[0]:.0f} ms' if load else '-'
        ws = f'{wall[0]:.2f} s' if wall else '-'
        w = ours_weights[p] if engine == 'ours' else weights[p]
        print(f'| {engine} | {w} | {rs} | {ls} | {ws} | {n} | {ratios}')
    row('ours', figs['ours'], ' | |')
    if p != 'none':
        o, q = figs['ours'], figs['peer']
        r_rss = f'{o[0][0] / q[0][0]:.2f}' if o[0] and q[0] else '-'
        r_load = f'{o[1][0] / q[1][0]:.2f}' if o[1] and q[1] else '-'
        row(p, q, f'{r_rss} | {r_load} |')
EOF
{
  echo
  echo "Commands (every run, in order, also in $out/commands.txt):"
  echo
  echo '```'
  awk '!seen[$0]++' "$out/commands.txt"
  echo '```'
} >> "$out/report.md"
cat "$out/report.md"
