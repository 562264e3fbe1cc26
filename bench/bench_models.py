"""The checkpoints of bench/weights.sh, made by bench/make_bench_models.sh with the test venv's
torch, transformers and safetensors.

    python bench_models.py bf16 SRC DST        DST: SRC's checkpoint with every tensor in bfloat16
                                               (torch's .to(bfloat16): round to nearest, ties to
                                               even), the other files copied, config dtype set
    python bench_models.py random1b TOKENIZER DST_F32 DST_BF16
                                               a ~1.2B-parameter Llama shape (hidden 2048, 16
                                               layers, 32 heads, 8 KV heads, intermediate 8192,
                                               SmolLM2's vocab and tokenizer, untied lm_head),
                                               seeded random weights, saved in fp32 and bf16
    python bench_models.py step-bytes CKPT DTYPE
                                               the weight bytes one decode step reads at DTYPE
                                               (f32 or bf16), from CKPT's tensor shapes
    python bench_models.py gguf-step-bytes FILE
                                               the same for a GGUF file, at the types it holds
                                               (gguf-py, e.g. llama.cpp's, on PYTHONPATH)
    python bench_models.py gguf-same A B       exits non-zero unless GGUF files A and B hold
                                               the same tensors, types and bytes

A decode step reads every matrix once, every norm vector once, one row of the input embedding
table, and the lm_head whole (the embedding table itself when the lm_head is tied).
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# What a checkpoint directory holds besides its weights, copied as they are.
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "chat_template.jinja")


def copy_side_files(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in SIDE_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))


def set_config_dtype(directory, dtype):
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["dtype"] = dtype
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def bf16(src, dst):
    import torch
    from safetensors.torch import load_file, save_file

    files = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))
    if files != ["model.safetensors"]:
        sys.exit(f"bench_models.py: {src} must hold one model.safetensors, not {files}")
    tensors = load_file(os.path.join(src, "model.safetensors"))
    tensors = {name: t.to(torch.bfloat16).contiguous() for name, t in tensors.items()}
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    copy_side_files(src, tmp)
    set_config_dtype(tmp, "bfloat16")
    save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    os.replace(tmp, dst)
    print(f"saved {dst}: {len(tensors)} bf16 tensors")


def random1b(tokenizer_dir, dst_f32, dst_bf16):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         max_position_embeddings=8192, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         pad_token_id=2, initializer_range=0.02)
    model = LlamaForCausalLM(config).eval()
    params = sum(p.numel() for p in model.parameters())
    for dst, dtype in ((dst_f32, torch.float32), (dst_bf16, torch.bfloat16)):
        tmp = dst + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.to(dtype).save_pretrained(tmp, max_shard_size="100GB")
        for name in SIDE_FILES:
            if name != "config.json" and os.path.exists(os.path.join(tokenizer_dir, name)):
                shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(tmp, name))
        os.replace(tmp, dst)
        print(f"saved {dst}: {params / 1e9:.3f}B parameters, {dtype}")


def step_bytes(ckpt, dtype):
    """Reads the safetensors headers only: the shapes, not the data."""
    import struct

    width = {"f32": 4, "bf16": 2}[dtype]
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    shapes = {}
    for name in files:
        with open(os.path.join(ckpt, name), "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        shapes.update({k: v["shape"] for k, v in header.items() if k != "__metadata__"})
    total = 0
    for name, shape in shapes.items():
        elements = 1
        for d in shape:
            elements *= d
        if name == "model.embed_tokens.weight":
            # The lookup reads one row; a tied lm_head reads the whole table once more.
            elements = shape[1]
            if config.get("tie_word_embeddings", False) and "lm_head.weight" not in shapes:
                elements += shape[0] * shape[1]
        total += elements * width
    print(total)


def gguf_step_bytes(path):
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    total = 0
    for name, t in tensors.items():
        nbytes = int(t.n_bytes)
        if name == "token_embd.weight":
            # GGUF shapes list the row length first: shape[1] rows of the vocabulary.
            rows = int(t.shape[1])
            row = nbytes // rows
            nbytes = row + (nbytes if "output.weight" not in tensors else 0)
        total += nbytes
    print(total)


def gguf_same(a, b):
    import gguf
    import numpy as np

    ta = {t.name: t for t in gguf.GGUFReader(a).tensors}
    tb = {t.name: t for t in gguf.GGUFReader(b).tensors}
    if ta.keys() != tb.keys():
        sys.exit(f"{a} and {b} name different tensors: {sorted(ta.keys() ^ tb.keys())}")
    for name in sorted(ta):
        x, y = ta[name], tb[name]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            sys.exit(f"{name}: {x.tensor_type.name} {list(x.shape)} in {a}, "
                     f"{y.tensor_type.name} {list(y.shape)} in {b}")
        if not np.array_equal(x.data.view(np.uint8), y.data.view(np.uint8)):
            sys.exit(f"{name}: different bytes in {a} and {b}")
    print(f"{len(ta)} tensors, the same types and bytes")


if __name__ == "__main__":
    commands = {"bf16": (bf16, 2), "random1b": (random1b, 3), "step-bytes": (step_bytes, 2),
                "gguf-step-bytes": (gguf_step_bytes, 1), "gguf-same": (gguf_same, 2)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or \
            len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    fn, _ = commands[sys.argv[1]]
    fn(*sys.argv[2:])
