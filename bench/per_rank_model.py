"""The per-rank view of tp N on one GPU (scripts/gpu-check.sh, stage per-rank): one rank of
the tp group run alone with a no-op communicator (TPC_SINGLE_RANK_VIEW=1, compute only) gives
its decode ms per token; this adds a modelled NCCL time for the collectives that rank's trace
lists for one decode step, to estimate tp N's latency on N GPUs.

    python3 per_rank_model.py TP COMPUTE_MS_PER_TOKEN TRACE.json.rank0 [--bus-GBps B]
        [--latency-us L]

The model, per collective of B bytes (what the trace records: the binary's own element type,
bf16 for the CUDA binary, so nothing is halved here), ring
algorithms as NCCL's tests count them: all_reduce L + 2 (N-1)/N x B / bus; all_gather and
reduce_scatter L + (N-1)/N x B / bus; no overlap with compute. Its inputs are assumptions,
stated here, not measurements: bus = 360 GB/s, about 80% of the 450 GB/s per direction of the
H200's 900 GB/s NVLink (NVIDIA's H200 datasheet); L = 15 us per collective, the order of
NCCL's small-message all-reduce latency over NVLink in nccl-tests. Where a machine with N GPUs
can be measured, that replaces this.
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("tp", type=int)
ap.add_argument("compute_ms", type=float)
ap.add_argument("trace")
ap.add_argument("--bus-GBps", type=float, default=360.0)
ap.add_argument("--latency-us", type=float, default=15.0)
a = ap.parse_args()

trace = json.load(open(a.trace))
decode = [c for c in trace["collectives"] if int(c.get("tokens", 0)) == 1]
# The decode steps repeat one pattern: its length is where the first module comes back.
first = decode[0]["module"] if decode else None
period = next((i for i in range(1, len(decode)) if decode[i]["module"] == first), len(decode))
step = decode[:period]
n, bus, lat = a.tp, a.bus_GBps * 1e9, a.latency_us * 1e-6
comm_s = 0.0
for c in step:
    b = int(c["bytes"])  # on the wire, in the binary's element type
    factor = 2 * (n - 1) / n if c["kind"] == "all_reduce" else (n - 1) / n
    comm_s += lat + factor * b / bus
comm_ms = comm_s * 1e3
print(f"tp {n}: compute {a.compute_ms:.3f} ms per token (one rank, no-op communicator); "
      f"{len(step)} collectives per step, modelled NCCL {comm_ms:.3f} ms; "
      f"estimate {a.compute_ms + comm_ms:.3f} ms per token")
