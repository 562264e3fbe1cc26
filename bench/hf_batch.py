"""transformers' side of bench/batching.sh: its own continuous batching (generate_batch,
paged|sdpa attention) on a checkpoint, on the CPU, with the lengths tpc bench uses.

    python hf_batch.py CKPT PROMPT_LEN OUTPUT_LEN NUM_PROMPTS CONCURRENCY THREADS

NUM_PROMPTS requests of PROMPT_LEN random token ids (seeded) and OUTPUT_LEN new tokens each
(greedy, end-of-sequence disabled), at most CONCURRENCY in one batch, on THREADS torch
threads. The KV cache is pinned (blocks of 16 tokens, enough for CONCURRENCY whole
sequences), not sized from the machine's free memory. A small warm-up run first; then the
timed run, best of 2. Prints one line: output tokens/s, and the tokens and seconds it took.
"""
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import AutoModelForCausalLM
from transformers.generation import ContinuousBatchingConfig, GenerationConfig


def main():
    ckpt = sys.argv[1]
    prompt_len, output_len, num_prompts, concurrency, threads = map(int, sys.argv[2:7])
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model.eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (prompt_len,), generator=generator).tolist()
               for _ in range(num_prompts)]
    block = 16
    blocks = concurrency * math.ceil((prompt_len + output_len) / block) + 1

    def run(inputs, new_tokens):
        config = ContinuousBatchingConfig(block_size=block, num_blocks=blocks,
                                          max_batch_tokens=max(prompt_len, concurrency),
                                          max_requests_per_batch=concurrency,
                                          allow_block_sharing=False)
        generation = GenerationConfig(max_new_tokens=new_tokens, do_sample=False,
                                      eos_token_id=-1, pad_token_id=0)
        start = time.perf_counter()
        out = model.generate_batch(inputs=inputs, generation_config=generation,
                                   continuous_batching_config=config, progress_bar=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(r.generated_tokens) for r in out.values())
        if len(out) != len(inputs) or tokens != len(inputs) * new_tokens:
            sys.exit(f"hf_batch: {len(out)} results of {len(inputs)} requests, {tokens} tokens "
                     f"of {len(inputs) * new_tokens}")
        return tokens, seconds

    run(prompts[:2], 4)  # warm-up
    best = None
    for _ in range(2):
        tokens, seconds = run(prompts, output_len)
        if best is None or seconds < best[1]:
            best = (tokens, seconds)
    tokens, seconds = best
    print(f"transformers generate_batch: concurrency {concurrency}, {threads} threads: "
          f"{tokens / seconds:.1f} output tok/s ({tokens} tokens in {seconds:.2f} s)")


if __name__ == "__main__":
    main()
