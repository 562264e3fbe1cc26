"""GGUF files as people download them, written by llama.cpp itself, and transformers' reference:

    python llama_cpp_files.py LLAMA_CPP_SRC LLAMA_CPP_BIN EXTRAS TOKENIZER_DIR OUTDIR TYPE...
    python llama_cpp_files.py --checkpoint LLAMA_CPP_SRC LLAMA_CPP_BIN EXTRAS CKPT OUTDIR TYPE...
    python llama_cpp_files.py --arch ARCH LLAMA_CPP_SRC LLAMA_CPP_BIN EXTRAS TOKENIZER_DIR OUTDIR TYPE...

A small random Llama checkpoint (hf_model.py's llama, widened: hidden 512, intermediate 1024,
8 heads of 64, 2 KV heads, tied embeddings, the vocabulary of TOKENIZER_DIR's tokenizer.json,
SmolLM2's) is saved with that tokenizer (with --checkpoint: CKPT itself, the real SmolLM2,
whose rows of 576 are no 256-blocks, so that its mixes are mostly llama-quantize's fallbacks,
Q5_0 or Q5_1, and Q8_0 for Q6_K), converted to an F32 file by llama.cpp's
convert_hf_to_gguf.py (with its own gguf-py, and EXTRAS on its path: bench/hf_extras.sh's
sentencepiece, which it imports whatever the tokenizer) and quantized by llama-quantize to each TYPE
(Q4_K_M, Q5_K_M, ...): OUTDIR/TYPE/TYPE.gguf. Each file must hold the K-quants its mix names
(Q4_K_M: Q4_K and Q6_K; Q5_K_M: Q5_K and Q6_K), or this fails saying what it holds. The
reference is transformers 5.17 loading that file (gguf_file=, its dequantization by gguf-py),
written as gguf_models.py writes one (reference.json, reference.bin, prompt.txt, force.txt),
for run_gguf.sh.

With --arch ARCH (gpt_oss, deepseek2, llama4: architectures transformers 5.17's GGUF loader
cannot read, see gguf_models.py; qwen2moe, whose converter's files it cannot; gemma3 and phi3, whose SentencePiece tokenizers transformers
cannot read), the small random checkpoint is hf_model.py's ARCH widened
so that its rows are 256-blocks (ARCHS below), with TOKENIZER_DIR's vocabulary (gemma3 and
phi3: a SentencePiece model trained here, SENTENCEPIECE below, TOKENIZER_DIR unused), and the
reference is that checkpoint with every parameter the file's value: each tensor the
converter wrote, dequantized by gguf-py, its transposes and splits undone
(gguf_models.file_values, which fails on a tensor the converter did not write as
gguf_models.py expects), computed by transformers' modeling code.
"""
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_models  # noqa: E402
import hf_model  # noqa: E402

# The block types each of llama-quantize's mixes must show (the rows here are 256-blocks).
# What each --arch checkpoint changes from gguf_models.py's tiny one: rows of 256-blocks, and
# halves of 256-blocks where tp 2 splits a row (a cut block would be held in bf16: rounded).
WIDE = {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64}
ARCHS = {
    "gpt_oss": dict(WIDE, intermediate_size=512, tie_word_embeddings=False),
    "deepseek2": dict(gguf_models.OVERRIDES["deepseek2"], hidden_size=512, num_attention_heads=8,
                      num_key_value_heads=8, q_lora_rank=256, kv_lora_rank=256,
                      qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                      intermediate_size=1024, moe_intermediate_size=512),
    "llama4": dict(gguf_models.OVERRIDES["llama4"], **WIDE, intermediate_size=512,
                   intermediate_size_mlp=1024),
    # gguf_models.py's six layers (five sliding), its query scale head_dim's.
    "gemma3": {**gguf_models.OVERRIDES["gemma3"], **WIDE, "query_pre_attn_scalar": 64,
               "intermediate_size": 1024},
    "phi3": {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
             "intermediate_size": 1024},
    # Widths other than Qwen2MoeConfig's defaults: tpc must read them from the file.
    "qwen2moe": {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
                 "intermediate_size": 1024, "moe_intermediate_size": 512,
                 "shared_expert_intermediate_size": 768, "mlp_only_layers": []},
}
# The architectures whose checkpoint gets a SentencePiece tokenizer.model trained here (the
# converter reads theirs with sentencepiece, as Gemma's and Phi-3's ship): BPE with byte
# fallback and no normalization, as both models' have; Gemma's without the dummy prefix. Its
# special tokens go in tokenizer_config.json's added_tokens_decoder, which the converter types:
# control where "special", else user-defined.
SENTENCEPIECE = {
    "gemma3": {"add_dummy_prefix": False, "class": "GemmaTokenizer",
               "control": ["<start_of_turn>", "<end_of_turn>"], "user": ["<ud>"]},
    "phi3": {"add_dummy_prefix": True, "class": "LlamaTokenizer",
             "control": ["<|end|>", "<|user|>", "<|assistant|>", "<|endoftext|>"],
             "user": ["<ud>"]},
}
MIXES = {"Q4_K_M": {"Q4_K", "Q6_K"}, "Q5_K_M": {"Q5_K", "Q6_K"}, "Q6_K": {"Q6_K"},
         "Q5_0": {"Q5_0"}, "Q5_1": {"Q5_1"}}


def run(cmd, log, env=None):
    with open(log, "w") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if done.returncode:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise SystemExit(f"llama_cpp_files.py: {' '.join(cmd[:3])} ... failed:\n{tail}")


def types_of(path, src):
    """{type name: tensors} of the GGUF file PATH, read by llama.cpp's own gguf-py."""
    code = ("import collections, sys; from gguf import GGUFReader; "
            "c = collections.Counter(t.tensor_type.name for t in GGUFReader(sys.argv[1]).tensors); "
            "print(' '.join(f'{k}={v}' for k, v in sorted(c.items())))")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.path.join(src, "gguf-py")))
    if out.returncode:
        raise SystemExit(f"llama_cpp_files.py: reading {path}: {out.stderr[-2000:]}")
    return dict(kv.split("=") for kv in out.stdout.split())


def train_sentencepiece(arch, extras, ckpt):
    """tokenizer.model and tokenizer_config.json for arch's checkpoint; the vocabulary size."""
    import json
    sys.path.insert(0, extras)
    import sentencepiece as spm
    import tokenizers_oracle
    how = SENTENCEPIECE[arch]
    os.makedirs(ckpt, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(tokenizers_oracle.CORPUS), model_prefix=os.path.join(ckpt, "sp"),
        model_type="bpe", vocab_size=700, byte_fallback=True, character_coverage=0.99,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=how["add_dummy_prefix"], split_digits=True,
        control_symbols=how["control"], user_defined_symbols=how["user"],
        num_threads=1, minloglevel=2)
    os.replace(os.path.join(ckpt, "sp.model"), os.path.join(ckpt, "tokenizer.model"))
    os.remove(os.path.join(ckpt, "sp.vocab"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(ckpt, "tokenizer.model"))
    decoder = {str(sp.piece_to_id(t)): {"content": t, "special": t in how["control"]}
               for t in how["control"] + how["user"]}
    with open(os.path.join(ckpt, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": how["class"], "added_tokens_decoder": decoder}, f)
    return sp.vocab_size()


def main():
    args = sys.argv[1:]
    real = bool(args) and args[0] == "--checkpoint"
    if real:
        args = args[1:]
    arch = None
    if len(args) > 1 and args[0] == "--arch":
        arch, args = args[1], args[2:]
        if arch not in ARCHS:
            raise SystemExit(f"llama_cpp_files.py: --arch {arch!r}: one of {', '.join(ARCHS)}")
    if len(args) < 6:
        raise SystemExit(__doc__)
    src, bin_dir, extras, tokenizer_dir, outdir = args[:5]
    mixes = args[5:]
    for mix in mixes:
        if mix not in MIXES:
            raise SystemExit(f"llama_cpp_files.py: no mix {mix!r}; one of {', '.join(MIXES)}")
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    if real:
        ckpt = tokenizer_dir
    elif arch in SENTENCEPIECE:
        ckpt = os.path.join(outdir, "checkpoint")
        overrides = dict(ARCHS[arch], vocab_size=train_sentencepiece(arch, extras, ckpt))
        model = hf_model.build(gguf_models.SOURCE.get(arch, arch), 0, 0.06, overrides)
        model.save_pretrained(ckpt)
    elif arch:
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
        overrides = dict(ARCHS[arch], vocab_size=len(tokenizer))
        model = hf_model.build(gguf_models.SOURCE.get(arch, arch), 0, 0.06, overrides)
        ckpt = os.path.join(outdir, "checkpoint")
        model.save_pretrained(ckpt)
        tokenizer.save_pretrained(ckpt)
    else:
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
        overrides = dict(gguf_models.OVERRIDES["llama_q4_k_m"], vocab_size=len(tokenizer),
                         tie_word_embeddings=True)
        model = hf_model.build("llama", 0, 0.06, overrides)
        ckpt = os.path.join(outdir, "checkpoint")
        model.save_pretrained(ckpt)
        tokenizer.save_pretrained(ckpt)
    f32 = os.path.join(outdir, "f32.gguf")
    convert = [sys.executable, os.path.join(src, "convert_hf_to_gguf.py"), ckpt, "--outtype",
               "f32", "--outfile", f32]
    run(convert, os.path.join(outdir, "convert.log"),
        dict(os.environ, PYTHONPATH=os.path.join(src, "gguf-py") + os.pathsep + extras))
    for mix in mixes:
        d = os.path.join(outdir, mix)
        os.makedirs(d, exist_ok=True)
        name = f"{mix}.gguf"
        path = os.path.join(d, name)
        run([os.path.join(bin_dir, "llama-quantize"), f32, path, mix],
            os.path.join(d, "quantize.log"))
        held = types_of(path, src)
        missing = MIXES[mix] - set(held)
        if missing:
            raise SystemExit(f"llama_cpp_files.py: llama-quantize's {mix} holds "
                             f"{held}, no {', '.join(sorted(missing))}")
        if arch:
            values = gguf_models.file_values(model, arch, path)
            loaded = gguf_models.with_file_values(model, values)
        else:
            loaded = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=name,
                                                                       dtype=torch.float32)
            loaded.set_attn_implementation("eager")
            loaded.eval()
            values = dict(loaded.state_dict())
        gguf_models.write_reference(mix, d, name, values, loaded)
        print(f"{mix}: tensors " + ", ".join(f"{v} {k}" for k, v in sorted(held.items())))


if __name__ == "__main__":
    main()
