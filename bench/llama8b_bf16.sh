#!/usr/bin/env bash
# A Llama-3-8B shape (bench/llama3-8b-config.json) with random bf16 weights at tp 2, both ranks
# on this machine: what fp32 could not hold (32 GB of weights on a 24 GB machine) fits in bf16
# (16 GB). Compiles with --weights-dtype bf16, runs a short prompt with --trace and checks each
# rank held exactly the weight bytes `tpc analyze` reports, and prints each rank's peak
# resident memory beside analyze's memory per rank.
# Usage: bench/llama8b_bf16.sh   (after scripts/build.sh; about 16 GB of free memory)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ckpt"
cp "$root/bench/llama3-8b-config.json" "$work/ckpt/config.json"
"$tpc" import "$work/ckpt/config.json" -o "$work/model.mlir" > /dev/null
"$tpc" compile "$work/model.mlir" --plan auto --tp 2 --weights-dtype bf16 -o "$work/out" \
  > /dev/null 2>&1
"$tpc" analyze "$work/model.mlir" --plan auto --tp 2 --weights-dtype bf16 --max-model-len 256 \
  --prefill-len 8 --json > "$work/analyze.json" 2> /dev/null
"$tpc" analyze "$work/model.mlir" --plan auto --tp 2 --weights-dtype bf16 --max-model-len 256 \
  --prefill-len 8 2> /dev/null | sed -n '/memory per rank/,/activation arena/p'
binary=$(find "$work/out" -maxdepth 1 -type f -executable | head -1)
# Each rank under /usr/bin/time for its peak resident set.
cat > "$work/rank.sh" << EOS
#!/usr/bin/env bash
exec /usr/bin/time -f "rank \$RANK peak resident %M KiB, %e s" -o "$work/time.\$RANK" "\$@"
EOS
chmod +x "$work/rank.sh"
start=$(date +%s)
"$tpc" launch -n 2 "$work/rank.sh" "$binary" --random-weights 1 --prompt-ids 1,2,3,4,5,6,7,8 \
  --max-new-tokens 4 --ignore-eos --max-model-len 256 --trace "$work/trace.json" --verbose
echo "wall: $(( $(date +%s) - start )) s (generating 8B random values dominates)"
cat "$work/time.0" "$work/time.1"
python3 - "$work/analyze.json" "$work/trace.json.rank0" "$work/trace.json.rank1" << 'EOP'
import json, sys
report = json.load(open(sys.argv[1]))["memory_per_rank"]
for path in sys.argv[2:]:
    trace = json.load(open(path))
    held, want = trace["weight_bytes_held"], report["weights_bytes"]
    print(f"rank {trace['rank']}: holds {held} weight bytes ({held / 2**30:.2f} GiB), analyze "
          f"says {want:.0f}: {'same' if held == want else 'DIFFERENT'}; arena "
          f"{trace['arena_bytes']} bytes, analyze {report['activation_arena_bytes']:.0f}")
EOP
