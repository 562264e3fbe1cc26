"""Checks tpc analyze --hosts against what a link must cost, not against the cost model's own
arithmetic: python3 hosts_prediction.py TPC MODEL PLAN.

- Where the link is slow enough, a collective takes its bytes over the link: an all-reduce
  between 2 hosts sends each host's whole sum once, so bytes * 8 / rate, within 1%; an
  all-gather sends each host's half.
- A slower link never makes any collective faster; on one host the link changes nothing.
- With memory so slow that the weight reads dominate, every host added pays; with memory so
  fast and a link so slow that the link dominates, none does.
"""
import json
import subprocess
import sys

tpc, model, plan = sys.argv[1:4]


def analyze(*flags):
    out = subprocess.run([tpc, "analyze", model, "--plan", plan, "--json", *flags],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def collectives(report, phase):
    return [(c["kind"], c["bytes"], c["predicted_us"]) for c in report[phase]["collectives"]]


slow = analyze("--tp", "2", "--hosts", "2", "--link-gbps", "0.001", "--link-latency-us", "0")
worst, checked = 0.0, 0
for kind, nbytes, us in collectives(slow, "prefill"):
    on_link = nbytes if kind == "all_reduce" else nbytes / 2
    if on_link >= 1000:  # seconds on the link, where a call's microseconds do not count
        worst = max(worst, abs(us / (on_link * 8 / 0.001 / 1e3) - 1))
        checked += 1
print("a slow link's time is its bytes over the rate: %s" % (checked > 0 and worst < 0.01))

monotone = True
for phase in ("prefill", "decode"):
    fast = collectives(analyze("--tp", "4", "--hosts", "2", "--link-gbps", "10"), phase)
    half = collectives(analyze("--tp", "4", "--hosts", "2", "--link-gbps", "5"), phase)
    monotone &= all(h[2] >= f[2] for f, h in zip(fast, half))
print("a slower link is never faster: %s" % monotone)

one = [c[2] for c in collectives(analyze("--tp", "4", "--hosts", "1", "--link-gbps", "10"), "decode")]
other = [c[2] for c in collectives(analyze("--tp", "4", "--hosts", "1", "--link-gbps", "0.1"), "decode")]
print("on one host the link changes nothing: %s" % (one == other))


def verdict(*flags):
    rows = analyze("--tp", "4", "--hosts", "4", *flags)["decode_by_hosts"]
    steps = [r["weights_us"] + r["collectives_us"] for r in rows]
    return [r["hosts"] for r in rows], steps.index(min(steps))


hosts, best = verdict("--host-mem-gbs", "0.001")
print("slow memory: the best is the most hosts: %s" % (best == len(hosts) - 1))
hosts, best = verdict("--host-mem-gbs", "1000", "--link-gbps", "0.01")
print("a slow link: the best is one host: %s" % (hosts[best] == 1))
