#!/usr/bin/env bash
# Decode and prefill of one model stored in several weight formats, in one run on this machine:
# tpc at tp 1 and tp 2 (one rank per thread) and llama.cpp (bench/llama_cpp.sh's build, -t 1 and
# -t 2, the same cores) on GGUF files with the same weights (bench/make_bench_models.sh), each
# decode against its bandwidth floor: the weight bytes one decode step reads over the read
# bandwidth of as many threads (bench/read_bandwidth.cpp, measured before and after the runs,
# the better taken: this shared virtual machine drifts by 10-20% within minutes).
#
# Bytes a step reads: every matrix and norm once, one row of the input embedding table, the
# lm_head whole (the embedding table once more when tied); llama.cpp's from the GGUF's own
# tensor sizes (bench/bench_models.py gguf-step-bytes).
#
# tpc: reads the same GGUF file as llama.cpp (tpc import FILE.gguf; the weights kept as the file
# stores them: f32, bf16, q8_0, q4_1, q4_k, and the mixes q4_k_m and q5_k_m), compile --plan auto --tp N, launch with --warmup
# (prefill: the median of 3 warm prefills; decode: the median step) and --ignore-eos, best of
# RUNS; its bytes a step reads are what `tpc analyze` says the binary reads (the largest rank's).
# llama.cpp: llama-bench, RUNS repetitions each: prefill = -p PROMPT -n 0; decode = -p 0 -n NEW
# -d PROMPT (decoding after a PROMPT-token context, as tpc's steps do); its mean.
#
# Usage: bench/weights.sh [smollm2|llama1b] [FORMATS]   FORMATS: comma-separated, from
#        f32,bf16,q8_0,q4_1,q4_k,q4_k_m,q5_k_m (default f32,bf16,q8_0,q4_1; q4_k, every
#        matrix Q4_K (--pure), exists for llama1b only: SmolLM2's rows of 576 are no multiple
#        of Q4_K's 256, and its q4_k_m and q5_k_m are mostly llama.cpp's fallbacks, Q5_0 and
#        Q5_1). A quantized format with +int8 (q4_k_m+int8) is the same file run by tpc with
#        --int8-activations (its llama.cpp columns are the plain format's).
# Environment: TPC (default build/bin/tpc), RUNS (3), PROMPT_TOKENS (128), NEW_TOKENS (32).
# Not a test: it takes minutes (the 1B model's f32 runs alone read 4.7 GB a step).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
model=${1:-smollm2}
IFS=, read -r -a formats <<< "${2:-f32,bf16,q8_0,q4_1}"
runs=${RUNS:-3}
prompt_len=${PROMPT_TOKENS:-128}
new_tokens=${NEW_TOKENS:-32}
die() { echo "weights.sh: $*" >&2; exit 1; }

case $model in smollm2 | llama1b) ;; *) die "no model '$model': smollm2 or llama1b" ;; esac
bases=()
for f in "${formats[@]}"; do
  base=${f%+int8}
  [[ $f == "$base" ]] || case $base in q8_0 | q4_1 | q4_k | q4_k_m | q5_k_m) ;;
    *) die "+int8 is for the quantized formats (q8_0, q4_1, q4_k, q4_k_m, q5_k_m), not $base" ;; esac
  [[ " ${bases[*]} " == *" $base "* ]] || bases+=("$base")
  case $base in
    f32 | bf16 | q8_0 | q4_1 | q4_k_m | q5_k_m) ;;
    q4_k) [[ $model == llama1b ]] || die "q4_k exists for llama1b only" ;;
    *) die "no format '$f': f32, bf16, q8_0, q4_1, q4_k, q4_k_m or q5_k_m" ;;
  esac
done
[[ -x $tpc ]] || die "no tpc at $tpc (build it, or set TPC)"
for tool in python3 g++; do command -v "$tool" > /dev/null || die "$tool is not installed"; done

venv=$("$root/scripts/venv.sh")
bin=$("$root/bench/llama_cpp.sh")
src=$("$root/bench/llama_cpp.sh" --src)
cache=$("$root/bench/make_bench_models.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gguf_file() { echo "$cache/$model-$1.gguf"; }

echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tpc $(git -C "$root" rev-parse --short HEAD) ($tpc); llama.cpp: $("$bin/llama-bench" \
  --version 2>&1 | grep -m1 -i version || echo unknown)"
echo "model $model; prompt $prompt_len tokens, $new_tokens new tokens; best of $runs"
echo

g++ -O3 -march=native -pthread -o "$work/read_bandwidth" "$root/bench/read_bandwidth.cpp"
declare -A bw
measure_bandwidth() {
  local threads line value
  for threads in 1 2; do
    line=$("$work/read_bandwidth" "$threads" 5)
    echo "$line"
    value=$(sed -n 's/.*: \([0-9.]*\) GB\/s.*/\1/p' <<< "$line")
    [[ -n $value ]] || die "read_bandwidth printed no GB/s: $line"
    if [[ -z ${bw[$threads]:-} ]] || python3 -c "import sys; sys.exit(not $value > ${bw[$threads]})"; then
      bw[$threads]=$value
    fi
  done
}
echo "== read bandwidth, before the runs"
measure_bandwidth
echo

min() { python3 -c "import sys; print(min(float(x) for x in sys.argv[1:]))" "$@"; }
declare -A decode prefill lc_decode lc_prefill bytes lc_bytes
prompt=$(python3 -c "print(','.join(str((7 * i + 3) % 250) for i in range($prompt_len)))")

echo "== tpc"
for f in "${formats[@]}"; do
  base=${f%+int8} extra=()
  [[ $f == "$base" ]] || extra=(--int8-activations)
  file=$(gguf_file "$base")
  [[ -e $file ]] || die "no $file (bench/make_bench_models.sh makes it)"
  [[ -e $work/$base.mlir ]] ||
    "$tpc" import "$file" -o "$work/$base.mlir" > /dev/null || die "tpc import $file failed"
  for tp in 1 2; do
    out_dir=$work/$base-tp$tp
    [[ -d $out_dir ]] || "$tpc" compile "$work/$base.mlir" --plan auto --tp "$tp" -o "$out_dir" \
      > "$out_dir.log" 2>&1 || { cat "$out_dir.log" >&2; die "tpc compile ($f, tp $tp) failed"; }
    binary=$(find "$out_dir" -maxdepth 1 -type f -perm -u+x | head -1)
    [[ -n $binary ]] || die "tpc compile wrote no binary into $out_dir"
    if [[ $tp == 1 ]]; then
      bytes[$f]=$("$tpc" analyze "$work/$base.mlir" --plan auto --tp 1 2> /dev/null |
        sed -n 's/.*a decode step reads \([0-9]*\) bytes.*/\1/p')
      [[ -n ${bytes[$f]} ]] || die "tpc analyze said no bytes a decode step reads"
    fi
    ds=() ps=()
    for run in $(seq "$runs"); do
      out=$("$tpc" launch -n "$tp" "$binary" --weights "$file" --prompt-ids "$prompt" \
        --max-new-tokens "$new_tokens" --ignore-eos --warmup "${extra[@]}" 2>&1 |
        sed 's/\[rank 0\] //') ||
        { echo "$out" >&2; die "tpc launch ($f, tp $tp) failed"; }
      d=$(sed -n 's/^decode: \([0-9.]*\) ms.*/\1/p' <<< "$out")
      p=$(sed -n 's/^prefill: \([0-9.]*\) ms.*/\1/p' <<< "$out")
      [[ -n $d && -n $p ]] || { echo "$out" >&2; die "no prefill or decode line from tpc"; }
      echo "tpc $f tp $tp, run $run: prefill $p ms; decode $d ms per token"
      ds+=("$d") ps+=("$p")
    done
    decode[$f$tp]=$(min "${ds[@]}")
    prefill[$f$tp]=$(min "${ps[@]}")
  done
done
echo

# llama-bench's JSON: a list of tests, each with n_prompt, n_gen and avg_ns (per repetition).
llama_bench() { # FILE THREADS ARGS... -> avg ms of the one test
  local file=$1 threads=$2
  shift 2
  "$bin/llama-bench" -m "$file" -t "$threads" -r "$runs" -o json "$@" > "$work/lb.json" \
    2> "$work/lb.log" || { tail -20 "$work/lb.log" >&2; die "llama-bench failed on $file"; }
  python3 -c "import json, sys; t = json.load(open(sys.argv[1])); assert len(t) == 1, t;
print(t[0]['avg_ns'] / 1e6)" "$work/lb.json"
}
echo "== llama.cpp"
for f in "${bases[@]}"; do
  file=$(gguf_file "$f")
  [[ -e $file ]] || die "no $file (bench/make_bench_models.sh makes it)"
  lc_bytes[$f]=$(PYTHONPATH=$src/gguf-py "$venv/bin/python" "$root/bench/bench_models.py" \
    gguf-step-bytes "$file")
  for threads in 1 2; do
    p=$(llama_bench "$file" "$threads" -p "$prompt_len" -n 0)
    g=$(llama_bench "$file" "$threads" -p 0 -n "$new_tokens" -d "$prompt_len")
    lc_prefill[$f$threads]=$p
    lc_decode[$f$threads]=$(python3 -c "print($g / $new_tokens)")
    printf 'llama.cpp %s -t %d: prefill %.3f ms; decode %.3f ms per token (mean of %d)\n' \
      "$f" "$threads" "$p" "${lc_decode[$f$threads]}" "$runs"
  done
done
echo
echo "== read bandwidth, after the runs"
measure_bandwidth
echo

echo "== decode ms per token against the floor (bytes a step reads / read bandwidth)," \
  "prefill of $prompt_len tokens"
python3 - "$model" "${bw[1]}" "${bw[2]}" "${formats[@]}" << EOF
import sys
model, bw = sys.argv[1], {1: float(sys.argv[2]), 2: float(sys.argv[3])}
formats = sys.argv[4:]
def d(s): return dict(kv.split("=", 1) for kv in s.split() if kv)
decode, prefill = d("""$(for k in "${!decode[@]}"; do echo "$k=${decode[$k]}"; done)"""), \
    d("""$(for k in "${!prefill[@]}"; do echo "$k=${prefill[$k]}"; done)""")
lc_decode, lc_prefill = d("""$(for k in "${!lc_decode[@]}"; do echo "$k=${lc_decode[$k]}"; done)"""), \
    d("""$(for k in "${!lc_prefill[@]}"; do echo "$k=${lc_prefill[$k]}"; done)""")
nbytes = d("""$(for k in "${!bytes[@]}"; do echo "$k=${bytes[$k]}"; done)""")
lc_nbytes = d("""$(for k in "${!lc_bytes[@]}"; do echo "$k=${lc_bytes[$k]}"; done)""")
def num(x, fmt="%.2f"): return "-" if x is None else fmt % x
print("%-11s %2s %9s %9s %6s %9s %9s %6s %7s %10s %10s" % (
    "fmt", "tp", "tpc ms", "floor ms", "x", "llama ms", "floor ms", "x", "tpc/ll",
    "tpc pre", "llama pre"))
for f in formats:
    for tp in (1, 2):
        k = f + str(tp)
        t = float(decode[k]) if k in decode else None
        floor = int(nbytes[f]) / (bw[tp] * 1e6) if f in nbytes else None
        base = f.removesuffix("+int8")
        l = float(lc_decode[base + str(tp)])
        lfloor = int(lc_nbytes[base]) / (bw[tp] * 1e6)
        print("%-11s %2d %9s %9s %6s %9s %9s %6s %7s %10s %10s" % (
            f, tp, num(t), num(floor), num(t / floor if t else None),
            num(l), num(lfloor), num(l / lfloor), num(t / l if t else None),
            num(float(prefill[k]) if k in prefill else None, "%.1f"),
            num(float(lc_prefill[base + str(tp)]), "%.1f")))
print()
for f in formats:
    print("%s: tpc reads %s MB a step, llama.cpp %s MB" % (
        f, num(int(nbytes[f]) / 1e6, "%.1f") if f in nbytes else "-",
        num(int(lc_nbytes[f.removesuffix("+int8")]) / 1e6, "%.1f")))
print("bandwidth: %.1f GB/s (1 thread), %.1f GB/s (2 threads), the better of before and after"
      % (bw[1], bw[2]))
EOF
