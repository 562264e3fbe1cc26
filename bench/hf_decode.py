"""transformers' side of bench/vs_transformers.sh: makes the ~100M-parameter Llama-shaped
checkpoint, then times transformers' eager greedy generation on it.

    python hf_decode.py make OUTDIR            save_pretrained a seeded random model (fp32)
    python hf_decode.py time OUTDIR PROMPT_LEN NEW_TOKENS THREADS
    torchrun --nproc-per-node N hf_decode.py tp OUTDIR PROMPT_LEN NEW_TOKENS
                                               the same, under transformers' own tensor
                                               parallelism (tp_plan="auto", Gloo, one thread
                                               per rank); rank 0 prints

`time` prints one line: prefill ms (generate with 1 new token), decode ms per token
((generate with N) - (generate with 1)) / (N - 1), each the best of 3, and the tokens, with eos
disabled so every run generates N. The prompt is the same as the tpc runs use.
"""
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make(outdir):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                         num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                         max_position_embeddings=4096, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, eos_token_id=2, bos_token_id=1,
                         initializer_range=0.05)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(outdir)
    params = sum(p.numel() for p in model.parameters())
    print(f"saved {outdir}: {params / 1e6:.1f}M parameters")


def prompt(n):
    return [(7 * i + 3) % 250 for i in range(n)]


def best_of(fn, runs=3):
    best = None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best, out


def run(outdir, prompt_len, new_tokens, threads, tp=False):
    torch.set_num_threads(threads)
    extra = {"tp_plan": "auto"} if tp else {}
    model = LlamaForCausalLM.from_pretrained(outdir, dtype=torch.float32, **extra).eval()
    ids = torch.tensor([prompt(prompt_len)])

    def generate(n):
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, eos_token_id=None,
                                  pad_token_id=0)

    generate(2)  # warm up
    t1, _ = best_of(lambda: generate(1))
    tn, out = best_of(lambda: generate(new_tokens))
    tokens = out[0, prompt_len:].tolist()
    decode = (tn - t1) / (new_tokens - 1)
    if tp:
        if int(os.environ["RANK"]) != 0:
            return
        world = os.environ["WORLD_SIZE"]
        what = f"transformers tp {world} (tp_plan auto, torchrun, Gloo, 1 thread per rank)"
    else:
        what = f"transformers threads {threads}"
    print(f"{what}: prefill {t1 * 1e3:.3f} ms; decode {decode * 1e3:.3f} "
          f"ms per token; tokens: {' '.join(map(str, tokens))}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "tp":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), 1, tp=True)
    else:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
