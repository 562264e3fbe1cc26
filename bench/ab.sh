# Sourced by the A/B benchmarks (decode_ab.sh, greedy_argmax.sh): RUNS rounds of side a then
# side b, so that the shared machine's drift hits both alike.
#   ab_interleave RUNS FN   FN SIDE prints one run of SIDE's decode ms per token
#   ab_median SIDE          the median of SIDE's runs
declare -A ab_times
ab_interleave() {
  local runs=$1 fn=$2 i side ms
  for ((i = 0; i < runs; ++i)); do
    for side in a b; do
      ms=$("$fn" "$side")
      ab_times[$side]+="$ms "
      echo "run $i $side: $ms ms/token"
    done
  done
}
ab_median() {
  printf '%s\n' ${ab_times[$1]} | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
