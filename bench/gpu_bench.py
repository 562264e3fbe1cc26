"""The GPU machine's side of the decode benchmark (scripts/gpu-check.sh, stage bench):

    python3 gpu_bench.py CONFIG.json --context C --new-tokens N --prefill P
        --tpc-decode-ms D --tpc-prefill-ms F [--device cuda|cpu] [--out RESULT.json]

Measures, in this run on this GPU: the device-to-device copy bandwidth (a large copy, bytes
read plus written), a cuBLAS bf16 matrix-product peak (8192^3 on random data), and
transformers' eager greedy `generate` of the same-shaped model (random bf16 weights; its
decode ms per token after a C-token prompt). Then states tpc's decode against the roofline
(every weight but the embedding table, plus the KV cache at C tokens, read once per step, at
the measured copy bandwidth) and against transformers, and tpc's prefill of P tokens in
TFLOP/s against the measured peak. --device cpu with a tiny config checks the arithmetic here.
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("--context", type=int, required=True)
ap.add_argument("--new-tokens", type=int, required=True)
ap.add_argument("--prefill", type=int, required=True)
ap.add_argument("--tpc-decode-ms", type=float, required=True)
ap.add_argument("--tpc-prefill-ms", type=float, required=True)
ap.add_argument("--device", default="cuda")
ap.add_argument("--out")
a = ap.parse_args()
dev = torch.device(a.device)
cuda = dev.type == "cuda"


def timed(fn, repeat):
    """Median seconds of `repeat` runs after a warm-up, synchronized."""
    fn()
    times = []
    for _ in range(repeat):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


# Ceilings, measured now.
n = (1 << 30) if cuda else (1 << 20)  # 2 GiB of bf16 on the GPU
src = torch.randn(n, device=dev).to(torch.bfloat16)
dst = torch.empty_like(src)
copy_s = timed(lambda: dst.copy_(src), 20)
bandwidth = 2 * src.numel() * 2 / copy_s  # bytes read + written per second
size = 8192 if cuda else 256
x = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
y = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
mm_s = timed(lambda: x @ y, 20)
peak = 2 * size**3 / mm_s
del src, dst, x, y

config = LlamaConfig.from_dict(json.load(open(a.config)))
with torch.device("meta"):
    model = LlamaForCausalLM(config)
model = model.to_empty(device=dev).to(torch.bfloat16).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02)
params = sum(p.numel() for p in model.parameters())
embedding = model.model.embed_tokens.weight.numel()
head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
kv_bytes = 2 * config.num_hidden_layers * a.context * config.num_key_value_heads * head_dim * 2
step_bytes = 2 * (params - embedding) + kv_bytes
roofline_ms = step_bytes / bandwidth * 1e3

ids = torch.randint(0, config.vocab_size, (1, a.context), device=dev)


def generate(new):
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                       min_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)


one = timed(lambda: generate(1), 3)
full = timed(lambda: generate(a.new_tokens), 3)
hf_decode_ms = (full - one) / (a.new_tokens - 1) * 1e3
prefill_flops = 2 * (params - embedding) * a.prefill
tpc_tflops = prefill_flops / (a.tpc_prefill_ms * 1e-3) / 1e12

result = {
    "device": torch.cuda.get_device_name(0) if cuda else "cpu",
    "copy_bandwidth_GBps": bandwidth / 1e9,
    "bf16_matmul_peak_TFLOPs": peak / 1e12,
    "params": params, "embedding_params": embedding, "context": a.context,
    "bytes_per_decode_step": step_bytes, "roofline_ms_per_token": roofline_ms,
    "tpc_decode_ms_per_token": a.tpc_decode_ms,
    "tpc_fraction_of_roofline": roofline_ms / a.tpc_decode_ms,
    "transformers_eager_decode_ms_per_token": hf_decode_ms,
    "tpc_speedup_over_transformers": hf_decode_ms / a.tpc_decode_ms,
    "prefill_tokens": a.prefill, "tpc_prefill_ms": a.tpc_prefill_ms,
    "tpc_prefill_TFLOPs": tpc_tflops, "tpc_prefill_fraction_of_peak": tpc_tflops / (peak / 1e12),
}
if a.out:
    json.dump(result, open(a.out, "w"), indent=1)
for k, v in result.items():
    print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
bars = [("decode >= 80% of the roofline", result["tpc_fraction_of_roofline"] >= 0.8),
        (">= 4x transformers eager", result["tpc_speedup_over_transformers"] >= 4),
        ("prefill >= 60% of the measured peak", result["tpc_prefill_fraction_of_peak"] >= 0.6)]
for what, ok in bars:
    print(f"bar: {what}: {'met' if ok else 'NOT met'}")
print("bench: " + ("ok" if all(ok for _, ok in bars) else "bars not met"))
