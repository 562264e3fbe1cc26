"""The GPU machine's side of the benchmark (scripts/gpu-check.sh, stage bench), and tpc's
generated weights in torch:

    python3 gpu_bench.py ids N VOCAB
        the benchmark's token ids, (7 i + 3) mod VOCAB for i < N, comma-separated
    python3 gpu_bench.py check-weights CONFIG.json SEED FILE.safetensors
        every tensor of `tpc init-weights --seed SEED`'s FILE (f32) against this file's copy of
        tpc's generator, bit for bit, and their names against transformers' model of CONFIG
    python3 gpu_bench.py bench CONFIG.json --seed S --context C --new-tokens N --prefill P
        --tpc-decode-ms D --tpc-prefill-ms F --tpc-logits FORCED.bin [--device cuda|cpu]
        [--out RESULT.json]

bench builds transformers' model of CONFIG on the device with its real initialisation (so
RoPE's inv_freq, a non-persistent buffer that `to_empty` would leave as garbage, is computed;
checked against a fresh CPU copy), then gives it tpc's weights for --random-weights S (bf16 on
the GPU, fp32 on the CPU). Before any timing it compares its teacher-forced logits with tpc's:
FORCED.bin is tpc's --dump-logits for the prompt ids(C) fed the next N - 1 of ids(C + N - 1),
N rows; they must agree within 0.05 x max |logit| (scripts/gpu-compare.py's bf16 tolerance),
else it stops there. Argmax agreement is printed, not required: with random weights the top
logits are near ties.

Then it measures, in this run on this device: the device-to-device copy bandwidth (bytes read
plus written), a bf16 matrix-product peak (8192^3), and transformers' eager greedy `generate`
after a C-token prompt (min_new_tokens = max_new_tokens, so both lengths run in full; decode ms
per token = (time for N - time for 1) / (N - 1), medians of 3 after a warm-up). It states tpc's
decode (D: the binary's --warmup median step) against the roofline (every weight but the
embedding table, plus the KV cache at C tokens, read once per step, at the measured
bandwidth) and against transformers, and tpc's prefill of P tokens (F: the --warmup median) in
TFLOP/s against the measured peak, counting what tpc's prefill computes: every layer's linears
for all P tokens, causal attention (q.k and p.v over the visible pairs only), and the lm_head
for the last token only (tpc's forward returns the last token's logits).
--device cpu with a small config checks all of it on the CPU (scripts/gpu-check.sh's dry run).
"""
import argparse
import json
import sys
import time

MASK = (1 << 64) - 1


def ids(n, vocab):
    return [(7 * i + 3) % vocab for i in range(n)]


# tpc's generated weights (runtime/include/tpcrt/random_weight.h): element i of parameter
# `name` is a hash of (seed, name, i). torch has no unsigned 64-bit arithmetic on every
# device, so the uint64 bit patterns live in int64 tensors: additions and products wrap the
# same way, and right shifts are made logical by masking.
def _splitmix_int(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def _signed(c):
    c &= MASK
    return c - (1 << 64) if c >> 63 else c


def _shr(x, k):
    return (x >> k) & ((1 << (64 - k)) - 1)


def _splitmix_tensor(x):
    x = x + _signed(0x9E3779B97F4A7C15)
    x = (x ^ _shr(x, 30)) * _signed(0xBF58476D1CE4E5B9)
    x = (x ^ _shr(x, 27)) * _signed(0x94D049BB133111EB)
    return x ^ _shr(x, 31)


def weight_key(seed, name):
    h = 1469598103934665603  # FNV-1a of the name
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & MASK
    return _splitmix_int(seed ^ h), "norm" in name


def tpc_weight(seed, name, shape, device, chunk=1 << 26):
    """Parameter `name` as tpc's --random-weights `seed` makes it, fp32 on `device`."""
    import torch

    key, norm = weight_key(seed, name)
    n = 1
    for d in shape:
        n *= d
    out = torch.empty(n, dtype=torch.float32, device=device)
    for start in range(0, n, chunk):
        index = torch.arange(start, min(n, start + chunk), dtype=torch.int64, device=device)
        bits = _splitmix_tensor(index + _signed(key))
        # float(bits >> 40) / 2^24 * 2 - 1 in [-1, 1), each step rounded to fp32 as in C++.
        unit = _shr(bits, 40).to(torch.float32) / 16777216.0 * 2.0 - 1.0
        out[start:start + index.numel()] = unit * 0.1 + 1.0 if norm else unit * 0.05
    return out.view(*shape)


def build_model(config_path, seed, device, dtype):
    """transformers' model of the config on `device`, really initialised, with tpc's weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**json.load(open(config_path)))
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tpc_weight(seed, name, tuple(p.shape), device).to(p.dtype))
    # RoPE's buffers as a fresh CPU copy of the module computes them: to_empty's garbage, or a
    # cast to bf16, would differ; the device's pow may differ from the CPU's by an ulp or two.
    for module_name, module in model.named_modules():
        if hasattr(module, "inv_freq"):
            fresh = type(module)(config=module.config).inv_freq
            if module.inv_freq.dtype != torch.float32 or not torch.allclose(
                    module.inv_freq.cpu(), fresh, rtol=1e-5, atol=0):
                sys.exit(f"bench: {module_name}.inv_freq differs from a fresh computation")
    return config, model


def check_weights(config_path, seed, path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    tensors = load_file(path)
    config = AutoConfig.for_model(**json.load(open(config_path)))
    with torch.device("meta"):
        names = {n for n, _ in AutoModelForCausalLM.from_config(config).named_parameters()}
    failed = False
    if set(tensors) != names:
        print(f"check-weights: tpc's tensors {sorted(set(tensors) - names)} are not "
              f"transformers' parameters; {sorted(names - set(tensors))} are missing")
        failed = True
    elements = 0
    for name, t in sorted(tensors.items()):
        mine = tpc_weight(seed, name, tuple(t.shape), "cpu")
        same = torch.equal(mine.view(torch.int32), t.float().view(torch.int32))
        elements += t.numel()
        if not same:
            worst = (mine - t).abs().max().item()
            print(f"check-weights: {name}: differs (max abs diff {worst:.3g})")
            failed = True
    print(f"check-weights: {len(tensors)} tensors, {elements} elements: "
          + ("FAILED" if failed else "bit-identical to tpc's"))
    return 0 if not failed else 1


def prefill_flops(model, config, tokens):
    """What tpc's prefill of `tokens` computes, as (linears, lm_head, attention) FLOPs."""
    linear = sum(p.numel() for n, p in model.named_parameters()
                 if p.dim() == 2 and ".layers." in n)
    head_dim = getattr(config, "head_dim", None) or (config.hidden_size //
                                                     config.num_attention_heads)
    visible = tokens * (tokens + 1) // 2  # causal (query, key) pairs
    attention = 2 * 2 * config.num_hidden_layers * config.num_attention_heads * head_dim * visible
    return 2 * linear * tokens, 2 * model.lm_head.weight.numel(), attention


def bench(a):
    import torch

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed(fn, repeat):
        """Median seconds of `repeat` runs after a warm-up, synchronized."""
        fn()
        times = []
        for _ in range(repeat):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    t_build = time.perf_counter()
    config, model = build_model(a.config, a.seed, dev, dtype)
    vocab = config.vocab_size
    print(f"model: transformers {type(model).__name__} on {dev} ({dtype}), tpc's weights of "
          f"seed {a.seed} ({time.perf_counter() - t_build:.1f} s)")

    # The same model? Teacher-forced logits against tpc's, before anything is timed.
    forced = ids(a.context + a.new_tokens - 1, vocab)
    tpc = torch.frombuffer(bytearray(open(a.tpc_logits, "rb").read()), dtype=torch.float32)
    if tpc.numel() != a.new_tokens * vocab:
        sys.exit(f"bench: {a.tpc_logits} holds {tpc.numel()} logits, not {a.new_tokens} x {vocab}")
    tpc = tpc.view(a.new_tokens, vocab)
    with torch.no_grad():
        hf = model(torch.tensor([forced], device=dev),
                   logits_to_keep=a.new_tokens).logits[0].float().cpu()
    diff = (hf - tpc).abs().max().item()
    scale = hf.abs().max().item()
    agree = int((hf.argmax(-1) == tpc.argmax(-1)).sum())
    logits_ok = diff <= 0.05 * scale
    print(f"logits: {a.new_tokens} teacher-forced steps, max abs diff {diff:.4g} (tolerance "
          f"{0.05 * scale:.4g} = 0.05 x max |logit|), argmax agrees at {agree} of "
          f"{a.new_tokens}: {'ok' if logits_ok else 'FAILED'}")
    if not logits_ok:
        if a.out:
            json.dump({"logits_max_abs_diff": diff, "logits_scale": scale}, open(a.out, "w"))
        print("bench: FAILED (tpc and transformers compute different models: no timing)")
        return 1

    # Ceilings, measured now.
    n = (1 << 30) if cuda else (1 << 20)  # 2 GiB of bf16 on the GPU
    src = torch.randn(n, device=dev).to(dtype)
    dst = torch.empty_like(src)
    copy_s = timed(lambda: dst.copy_(src), 20)
    bandwidth = 2 * src.numel() * src.element_size() / copy_s  # bytes read + written per second
    size = 8192 if cuda else 256
    x = torch.randn(size, size, device=dev, dtype=dtype)
    y = torch.randn(size, size, device=dev, dtype=dtype)
    mm_s = timed(lambda: x @ y, 20)
    peak = 2 * size**3 / mm_s
    del src, dst, x, y

    element = torch.tensor([], dtype=dtype).element_size()
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_bytes = (2 * config.num_hidden_layers * a.context * config.num_key_value_heads * head_dim *
                element)
    step_bytes = element * (params - embedding) + kv_bytes
    roofline_ms = step_bytes / bandwidth * 1e3

    prompt = torch.tensor([ids(a.context, vocab)], device=dev)

    def generate(new):
        with torch.no_grad():
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, eos_token_id=None,
                           pad_token_id=0)

    one = timed(lambda: generate(1), 3)
    full = timed(lambda: generate(a.new_tokens), 3)
    hf_decode_ms = (full - one) / (a.new_tokens - 1) * 1e3
    linear_flops, head_flops, attention_flops = prefill_flops(model, config, a.prefill)
    prefill_flops_total = linear_flops + head_flops + attention_flops
    tpc_tflops = prefill_flops_total / (a.tpc_prefill_ms * 1e-3) / 1e12

    result = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "logits_max_abs_diff": diff, "logits_scale": scale, "logits_argmax_agree": agree,
        "copy_bandwidth_GBps": bandwidth / 1e9,
        "matmul_peak_TFLOPs": peak / 1e12,
        "params": params, "embedding_params": embedding, "context": a.context,
        "bytes_per_decode_step": step_bytes, "roofline_ms_per_token": roofline_ms,
        "tpc_decode_ms_per_token": a.tpc_decode_ms,
        "tpc_fraction_of_roofline": roofline_ms / a.tpc_decode_ms,
        "transformers_eager_decode_ms_per_token": hf_decode_ms,
        "tpc_speedup_over_transformers": hf_decode_ms / a.tpc_decode_ms,
        "prefill_tokens": a.prefill, "prefill_flops_linears": linear_flops,
        "prefill_flops_lm_head_last_token": head_flops,
        "prefill_flops_attention_causal": attention_flops,
        "tpc_prefill_ms": a.tpc_prefill_ms,
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
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ids":
        print(",".join(map(str, ids(int(sys.argv[2]), int(sys.argv[3])))))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "check-weights":
        return check_weights(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("command", choices=["bench"])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--context", type=int, required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--prefill", type=int, required=True)
    ap.add_argument("--tpc-decode-ms", type=float, required=True)
    ap.add_argument("--tpc-prefill-ms", type=float, required=True)
    ap.add_argument("--tpc-logits", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out")
    return bench(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
