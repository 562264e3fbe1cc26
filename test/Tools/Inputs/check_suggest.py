"""Holds `tpc suggest` to what must be true of any ranking, not to its cost model's arithmetic:
python3 check_suggest.py TPC DENSE_MODEL MOE_CONFIG

- It lists every mesh of a divisor of --ranks once (each plan), and ranks only what `tpc check`
  accepts: a mesh it refuses, check refuses with the same first error.
- Its order is its own figures' order, and --memory-per-rank keeps exactly the meshes within it.
- Physics: at concurrency 1 stages run one after another, so pp P x tp T is never faster than
  tp T; with a link too slow to use, the best is on one host; with memory so slow that the
  reads are all, the best splits the reads over the most ranks; with many sequences and
  slow arithmetic, two stages at work at once beat one rank; with one bus the only limit,
  two stages on it are no faster than one rank.
- An MoE step reads only the experts its token is routed to: for top_k of E experts a decode
  step's reads (at a known rate) are those of everything but the banks, plus top_k/E of them,
  counted here from the config.
"""
import json
import os
import subprocess
import sys
import tempfile

tpc, dense, moe = sys.argv[1:4]


def suggest(model, *flags):
    out = subprocess.run([tpc, "suggest", model, "--json", *flags], capture_output=True,
                         text=True)
    return json.loads(out.stdout)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


# Every mesh once; ranked ones compile under tpc check, refused ones fail it the same way.
report = suggest(dense, "--ranks", "4")
seen = sorted((c["pp"], c["tp"]) for c in report["candidates"] + report["not_ranked"])
expected = sorted((pp, used // pp) for used in divisors(4) for pp in divisors(used))
print("every mesh of a divisor of the ranks, once: %s" % (seen == expected))


def check(model, pp, tp, plan="auto"):
    return subprocess.run([tpc, "check", model, "--plan", plan, "--tp", str(tp), "--pp", str(pp)],
                          capture_output=True, text=True)


agree = all(check(dense, c["pp"], c["tp"]).returncode == 0 for c in report["candidates"])
for c in report["not_ranked"]:
    result = check(dense, c["pp"], c["tp"])
    agree = agree and result.returncode != 0 and c["error"] in result.stderr
print("ranked meshes pass tpc check, refused ones fail it with the same error: %s (%d refused)"
      % (agree, len(report["not_ranked"])))

for flags, key, sign in ((("--concurrency", "8"), "throughput_tok_s", -1),
                         (("--concurrency", "1"), "decode_ms", 1)):
    r = suggest(dense, "--ranks", "4", *flags)
    values = [sign * c[key] for c in r["candidates"]]
    ordered = values == sorted(values) and [c["rank"] for c in r["candidates"]] == list(
        range(1, len(values) + 1)) and r["best"]["mesh"] == r["candidates"][0]["mesh"]
    print("ranked by %s, best first: %s" % (key, ordered))

memories = sorted(c["memory_per_rank_bytes"] for c in report["candidates"])
limit = (memories[0] + memories[-1]) / 2
limited = suggest(dense, "--ranks", "4", "--memory-per-rank", "%d" % limit)
kept = [c["mesh"] for c in report["candidates"] if c["memory_per_rank_bytes"] <= limit]
dropped = [c["mesh"] for c in limited["not_ranked"] if "--memory-per-rank" in c["error"]]
print("--memory-per-rank keeps exactly the meshes within it: %s" % (
    [c["mesh"] for c in limited["candidates"]] == kept and len(dropped) > 0 and
    len(kept) + len(dropped) == len(report["candidates"])))

# Physics.
c1 = {c["mesh"]: c["decode_ms"] for c in suggest(dense, "--ranks", "4")["candidates"]}
never = all(ms >= c1["tp %s" % mesh.split(" x tp ")[1]] for mesh, ms in c1.items()
            if mesh.startswith("pp "))
print("at concurrency 1, pp P x tp T is never faster than tp T: %s" % never)
slow_link = suggest(dense, "--ranks", "2", "--hosts", "2", "--link-gbps", "1e-6")
print("a link too slow to use: the best is on one host: %s" % (
    slow_link["candidates"][0]["hosts"] == 1))
slow_memory = suggest(dense, "--ranks", "4", "--core-gbs", "1e-6", "--host-mem-gbs", "1e6")
print("memory slow beyond all else: the best is tp 4: %s" % (
    slow_memory["best"]["mesh"] == "tp 4"))
slow_math = {c["mesh"]: c["throughput_tok_s"] for c in suggest(
    dense, "--ranks", "2", "--concurrency", "8", "--core-gflops", "1e-3")["candidates"]}
print("slow arithmetic at concurrency 8: pp 2 beats one rank: %s" % (
    slow_math["pp 2 x tp 1"] > 1.5 * slow_math["tp 1"]))
# One bus, fast cores and arithmetic: a round reads every weight once through it whatever the
# mesh, and pp 2 reads each stage's once a step of half the sequences, so twice a round.
bus = {c["mesh"]: c["throughput_tok_s"] for c in suggest(
    dense, "--ranks", "2", "--concurrency", "8", "--core-gbs", "1e6", "--core-gflops", "1e9",
    "--prefill-len", "1")["candidates"]}
print("one bus bounds the reads: pp 2 on one host is no faster than tp 1: %s" % (
    bus["pp 2 x tp 1"] <= bus["tp 1"]))

# An MoE model: expert parallelism ranked beside tp, and a step's reads routed.
moe_report = suggest(moe, "--ranks", "2")
plans = sorted((c["mesh"], c["plan"]) for c in moe_report["candidates"] + moe_report["not_ranked"])
print("an MoE model's meshes: %s" % plans)
config = json.load(open(moe))
hidden, inter = config["hidden_size"], config["moe_intermediate_size"]
experts, top_k, layers = config["num_experts"], config["num_experts_per_tok"], config["num_hidden_layers"]
bank_bytes = layers * experts * 3 * hidden * inter * 4  # gate, up and down, f32
rate = 1e-3  # GB/s: the reads are all there is
tp1 = [c for c in suggest(moe, "--ranks", "1", "--core-gbs", str(rate), "--host-mem-gbs", "1e6",
                          "--prefill-len", "1")["candidates"] if c["mesh"] == "tp 1"][0]
read = tp1["decode_ms"] * 1e-3 * rate * 1e9
# What the rank holds besides the banks, and a token's keys and values (its context is 1).
with tempfile.TemporaryDirectory() as scratch:
    mlir = os.path.join(scratch, "moe.mlir")
    subprocess.run([tpc, "import", moe, "-o", mlir], check=True, capture_output=True)
    analyzed = json.loads(subprocess.run(
        [tpc, "analyze", mlir, "--plan", "auto", "--tp", "1", "--json"], check=True,
        capture_output=True, text=True).stdout)["memory_per_rank"]
others = analyzed["weights_bytes"] - bank_bytes + analyzed["kv_cache_bytes_per_token"]
everything_else = read - bank_bytes * top_k / experts
print("an MoE decode step reads top_k/E of the expert banks: %s" % (
    0 < everything_else <= others * 1.001 and bank_bytes > others))
