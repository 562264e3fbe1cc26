"""Tiny GGUF files of every architecture tpc imports from GGUF, and transformers' reference:

    python gguf_models.py OUTDIR [ARCH,ARCH...]      (default: all of ARCHS; needs gguf-py)

(and KQUANT_ARCHS, named: llama files of K-quant mixes, below)

For each ARCH, hf_model.py's build() makes a tiny random transformers model (2 layers, gemma3's
6, smollm3's 4; hidden 64, 4 heads, 2 KV heads; config changes below keep it to what a GGUF
file can say), and this writes it into OUTDIR/ARCH/ARCH.gguf as llama.cpp's converter
(convert_hf_to_gguf.py) would: the architecture's metadata keys, gguf-py's tensor names
(get_tensor_name_map), q/k rows permuted for llama.cpp's RoPE by the converter's LlamaModel
(llama's and smollm3's), Gemma 2's and 3's norms stored as 1 + w, vectors in F32 and
matrices in F32, F16, Q8_0, Q4_0 or MXFP4 (gguf.quants.quantize; which one is per tensor, below, so
every architecture has quantized matrices of both kinds, some split by tp 2 across their
blocks' rows, some along them; KQUANT_ARCHS' in Q4_K, Q5_K and Q6_K written by kquants.py,
and Q5_0 and Q5_1; qwen3moe's experts as the converter's 3D ffn_*_exps, gate_up_proj
split into its gate and up halves; gpt_oss's transposed to llama.cpp's [out, in] and split
into the even and odd columns of its interleaved gate_up_proj; deepseek2's kv_b_proj split
into attn_k_b, each head's key rows transposed, and attn_v_b). The file holds no tokenizer,
only what the config needs (a token list where the converter writes no vocab_size).

The reference is transformers 5.17 loading that file (from_pretrained(dir, gguf_file=...,
dtype=torch.float32): its GGUF loader builds the config from the metadata, as tpc must, and
dequantizes every tensor); before using it, every parameter it loaded is checked against the
source model's value after the same rounding (quantize then dequantize), within 1e-6, so a
file this script wrote wrongly fails here rather than as a tpc mismatch. Where the loader
leaves out what llama.cpp computes from the file (BEYOND_LOADER), the reference is the loaded
model with the source checkpoint's value of those fields. The architectures that loader does
not know (NO_LOADER: olmo2, smollm3) have as reference the source model with every parameter
the file's value (the same rounding), computed by transformers' modeling code; what llama.cpp
takes from such a file that no key says is the source model's too (SmolLM3's layer without
RoPE, every fourth), and must move the logits. Then, as
hf_model.py: a prompt of 8 ids with clear greedy margins (and router gaps, for an MoE), greedy generate of 16 tokens and the
teacher-forced logits, into OUTDIR/ARCH/reference.json, reference.bin, prompt.txt, force.txt;
and OUTDIR/ARCH/gguf_config.json: load_gguf_checkpoint(file)["config"], for reading.
"""
import copy
import json
import math
import os
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
import transformers

import gguf
from gguf.quants import dequantize, quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_model  # noqa: E402
import kquants  # noqa: E402

Q = gguf.GGMLQuantizationType
ARCHS = ["llama", "llama3rope", "mistral", "mixtral", "qwen2", "qwen3", "qwen3moe", "qwen2moe",
         "phi3",
         "gemma", "gemma2", "gemma3", "olmo2", "smollm3", "gpt_oss", "deepseek2", "llama4"]
# Llama files of the mixes llama-quantize writes, Q4_K_M and Q5_K_M (llama.cpp's
# llama_tensor_get_type): Q4_K (Q5_K) matrices, Q6_K for the output and for attn_v and
# ffn_down in the layers it gives more bits (of two layers, the first), and where a row is no
# whole 256-block the fallback Q5_0 (Q5_1), which here the embedding takes so that both are
# read. Rows of 512 and 1024, so that tp 2's pieces of attn_output's and ffn_down's rows are
# still whole 256-blocks.
KQUANT_ARCHS = ["llama_q4_k_m", "llama_q5_k_m"]
# Written by the converter's LlamaModel (SmolLM3Model is a subclass): q/k rows permuted,
# vocab_size and rope.dimension_count in the metadata.
LLAMA_FILES = ("llama", "llama3rope", "mistral", "mixtral", "smollm3") + tuple(KQUANT_ARCHS)

# What each architecture's source model changes from hf_model.py's tiny config, so that the
# GGUF file can say it: llama's llama3 RoPE scaling would be a rope_freqs tensor (which
# transformers ignores and tpc refuses), and llama and gemma2 get a head_dim that is not
# hidden / heads, so that the file's rope.dimension_count / attention.key_length matter.
# Settings the GGUF loader does not read (mistral's sliding_window, gemma2's
# query_pre_attn_scalar, phi3's original_max_position_embeddings) are left to the loaded
# config's defaults, which tpc must then use too: the reference is the loaded model.
OVERRIDES = {
    "llama": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
              "head_dim": 32},
    # Llama 3.1's scaling, its band moved to this tiny model's positions (an original context
    # of 64: all but the two fastest of the 16 pairs are slowed), which the converter writes as
    # the rope_freqs tensor.
    "llama3rope": {"rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0,
                                       "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64},
                   "head_dim": 32},
    "gemma2": {"head_dim": 32},
    # Six layers, so that Gemma3TextConfig's pattern (every sixth layer global, which the file
    # cannot say) gives five sliding layers (window 8) and a global one; its RoPE linearly
    # scaled by 4 (the converter's rope.scaling.*); query_pre_attn_scalar head_dim's, as
    # llama.cpp takes it (the file cannot say it either).
    "gemma3": {"head_dim": 32, "num_hidden_layers": 6, "layer_types": None,
               "query_pre_attn_scalar": 32},
    # The loader reads no head_dim for qwen3 (Qwen3Config's default, 128, applies), so the
    # model must have that one.
    "qwen3": {"head_dim": 128},
    # Every layer routed (llama.cpp's qwen3moe has no dense layers, no key would say which),
    # and the experts' width Qwen3MoeConfig's default, 768: the loader does not read
    # expert_feed_forward_length. (Its norm_topk_prob is the loader's GGUF default, true.)
    "qwen3moe": {"mlp_only_layers": [], "moe_intermediate_size": 768},
    # Every layer routed (llama.cpp's qwen2moe too), and the widths Qwen2MoeConfig's defaults:
    # the loader reads neither expert_feed_forward_length nor expert_shared_feed_forward_length.
    "qwen2moe": {"mlp_only_layers": [], "moe_intermediate_size": 1408,
                 "shared_expert_intermediate_size": 5632},
    # Four layers with llama.cpp's layers without RoPE (every fourth, which no key says:
    # SmolLM3Config's default interval), none sliding (llama.cpp's smollm3 has no window), and
    # a head_dim that is not hidden / heads, so that rope.dimension_count matters.
    "smollm3": {"num_hidden_layers": 4, "no_rope_layers": None, "use_sliding_window": False,
                "sliding_window": None, "head_dim": 32},
    # Greedy routing (llama.cpp scores groups of experts by DeepSeek-V3's rule, so tpc refuses
    # a deepseek2 file with groups), and YaRN as DeepSeek-V2 has it (mscale = mscale_all_dim,
    # which the converter writes as yarn_log_multiplier), its band moved to this tiny model's
    # positions.
    # What llama.cpp takes for every llama4 file (no key says them), Llama4TextConfig's defaults
    # too: chunks of 8192 and no RoPE on every fourth layer, the temperature from 8192 by 0.1.
    "llama4": {"no_rope_layers": None, "attention_chunk_size": 8192, "floor_scale": 8192,
               "attn_scale": 0.1},
    "deepseek2": {"topk_method": "greedy", "n_group": 1, "topk_group": 1,
                  "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                      "original_max_position_embeddings": 64,
                                      "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707,
                                      "mscale_all_dim": 0.707}},
}
for _arch in KQUANT_ARCHS:
    OVERRIDES[_arch] = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                        "hidden_size": 512, "intermediate_size": 1024,
                        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64}

# The storage of each matrix, by gguf-py's module name (the rest F32). tp 2 splits attn_q /
# attn_k / attn_v / ffn_gate / ffn_up by rows (whole blocks) and attn_output / ffn_down along
# their rows (64 / 2 = 32 columns, one block): both kinds of Q8_0 and Q4_0 split.
QUANT = {
    "llama": {"attn_q": Q.Q8_0, "attn_k": Q.Q4_0, "attn_v": Q.F16, "attn_output": Q.Q8_0,
              "ffn_gate": Q.Q4_0, "ffn_up": Q.MXFP4, "ffn_down": Q.Q8_0, "token_embd": Q.F16,
              "output": Q.Q8_0},
    "llama3rope": {"attn_q": Q.Q4_0, "attn_k": Q.Q8_0, "ffn_up": Q.Q8_0, "output": Q.F16},
    "mistral": {"attn_q": Q.Q4_0, "attn_k": Q.Q8_0, "attn_output": Q.Q4_0, "ffn_up": Q.Q8_0,
                "token_embd": Q.Q8_0},
    "qwen2": {"attn_q": Q.Q8_0, "attn_v": Q.Q4_0, "ffn_down": Q.Q4_0, "ffn_up": Q.F16,
              "token_embd": Q.Q8_0},
    "qwen3": {"attn_k": Q.Q8_0, "attn_output": Q.F16, "ffn_gate": Q.Q8_0, "ffn_down": Q.Q4_0,
              "output": Q.Q4_0},
    # The experts are 3D ([experts, rows, row]): quantized along their rows as llama.cpp does.
    "qwen3moe": {"attn_q": Q.Q8_0, "attn_v": Q.Q4_0, "attn_output": Q.Q8_0,
                 "ffn_gate_exps": Q.Q8_0, "ffn_up_exps": Q.MXFP4, "ffn_down_exps": Q.Q8_0,
                 "output": Q.Q4_0},
    "phi3": {"attn_qkv": Q.Q8_0, "attn_output": Q.Q4_0, "ffn_up": Q.Q4_0, "ffn_down": Q.Q8_0,
             "token_embd": Q.F16},
    # The shared expert's matrices quantized too (tpc holds them widened, as one expert).
    "qwen2moe": {"attn_q": Q.Q4_0, "attn_k": Q.Q8_0, "ffn_gate_exps": Q.Q4_0,
                 "ffn_up_exps": Q.Q8_0, "ffn_down_exps": Q.Q8_0, "ffn_gate_shexp": Q.Q8_0,
                 "ffn_up_shexp": Q.Q4_0, "ffn_down_shexp": Q.F16, "output": Q.Q8_0},
    # Mixtral's experts as the converter writes a llama file with experts: 3D ffn_*_exps.
    "mixtral": {"attn_q": Q.Q4_0, "attn_k": Q.Q8_0, "attn_output": Q.Q5_0,
                "ffn_gate_exps": Q.Q8_0, "ffn_up_exps": Q.Q5_1, "ffn_down_exps": Q.Q4_0,
                "output": Q.Q8_0},
    "gemma": {"attn_q": Q.Q8_0, "attn_k": Q.Q5_0, "attn_v": Q.Q4_0, "attn_output": Q.Q5_1,
              "ffn_gate": Q.F16, "ffn_down": Q.Q8_0, "token_embd": Q.Q5_1},
    "gemma2": {"attn_q": Q.Q4_0, "attn_k": Q.F16, "attn_output": Q.Q8_0, "ffn_gate": Q.Q8_0,
               "ffn_down": Q.Q4_0, "token_embd": Q.Q8_0},
    "gemma3": {"attn_q": Q.Q8_0, "attn_v": Q.Q4_0, "attn_output": Q.Q4_0, "ffn_up": Q.F16,
               "ffn_down": Q.Q8_0, "token_embd": Q.Q4_0},
    "olmo2": {"attn_q": Q.Q4_0, "attn_k": Q.Q8_0, "attn_v": Q.F16, "attn_output": Q.Q8_0,
              "ffn_gate": Q.Q8_0, "ffn_down": Q.Q4_0, "token_embd": Q.F16, "output": Q.Q4_0},
    "smollm3": {"attn_q": Q.Q8_0, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0, "attn_output": Q.Q4_0,
                "ffn_up": Q.Q4_0, "ffn_down": Q.Q8_0, "token_embd": Q.Q8_0},
    # GPT-OSS's experts in MXFP4, as the converter repacks the released checkpoints' (each
    # expert's matrix transposed to llama.cpp's [out, in], gate and up apart); the router, the
    # sinks and every bias F32, as the converter leaves them.
    "gpt_oss": {"attn_q": Q.Q8_0, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0, "attn_output": Q.Q4_0,
                "ffn_gate_exps": Q.MXFP4, "ffn_up_exps": Q.MXFP4, "ffn_down_exps": Q.MXFP4,
                "token_embd": Q.Q8_0, "output": Q.Q8_0},
    # DeepSeek-V2's latent attention: attn_k_b's rows are the 16 nope dims (F16: no whole
    # block), attn_v_b's the 32 of kv_lora_rank; o_proj's rows of 4 x 12 values no block either,
    # nor the shared expert's down_proj's 32 split by tp 2.
    # Llama 4: the experts transposed to llama.cpp's [out, in] as the converter does; the dense
    # layers' down_proj (rows of 96, split by tp 2 into 48) no whole blocks.
    "llama4": {"attn_q": Q.Q8_0, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0, "attn_output": Q.Q4_0,
               "ffn_gate": Q.Q8_0, "ffn_up": Q.Q4_0, "ffn_down": Q.F16,
               "ffn_gate_exps": Q.Q8_0, "ffn_up_exps": Q.Q4_0, "ffn_down_exps": Q.Q8_0,
               "ffn_gate_shexp": Q.Q4_0, "ffn_up_shexp": Q.Q8_0, "ffn_down_shexp": Q.Q8_0,
               "token_embd": Q.Q8_0, "output": Q.Q4_0},
    "deepseek2": {"attn_q_a": Q.Q8_0, "attn_q_b": Q.Q4_0, "attn_kv_a_mqa": Q.Q8_0,
                  "attn_k_b": Q.F16, "attn_v_b": Q.Q8_0, "attn_output": Q.F16,
                  "ffn_gate": Q.Q4_0, "ffn_down": Q.Q8_0, "ffn_gate_exps": Q.Q8_0,
                  "ffn_up_exps": Q.Q4_0, "ffn_down_exps": Q.Q8_0, "ffn_gate_shexp": Q.Q4_0,
                  "ffn_down_shexp": Q.F16, "token_embd": Q.Q8_0, "output": Q.Q4_0},
}
# A list: the type of each layer's tensor.
for _arch, _k, _fallback in (("llama_q4_k_m", Q.Q4_K, Q.Q5_0), ("llama_q5_k_m", Q.Q5_K, Q.Q5_1)):
    QUANT[_arch] = {"attn_q": _k, "attn_k": _k, "attn_output": _k, "ffn_gate": _k, "ffn_up": _k,
                    "attn_v": [Q.Q6_K, _k], "ffn_down": [Q.Q6_K, _k], "output": Q.Q6_K,
                    "token_embd": _fallback}

# Files transformers 5.17 cannot load, written for tpc alone: its GGUF loader calls a llama
# file named "mistral" model_type mistral, then looks "mistral" up in gguf-py's architecture
# names for the tensor names, which gguf-py (0.19) does not have.
UNLOADABLE = {"mistral": "transformers 5.17 with gguf-py 0.19 raises 'Unknown gguf model_type: "
                         "mistral in gguf-py'"}

GGUF_ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "llama3rope": gguf.MODEL_ARCH.LLAMA,
             "mixtral": gguf.MODEL_ARCH.LLAMA,
             "llama_q4_k_m": gguf.MODEL_ARCH.LLAMA, "llama_q5_k_m": gguf.MODEL_ARCH.LLAMA,
             "mistral": gguf.MODEL_ARCH.LLAMA,
             "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3,
             "qwen3moe": gguf.MODEL_ARCH.QWEN3MOE, "qwen2moe": gguf.MODEL_ARCH.QWEN2MOE,
             "phi3": gguf.MODEL_ARCH.PHI3, "gemma": gguf.MODEL_ARCH.GEMMA,
             "gemma2": gguf.MODEL_ARCH.GEMMA2,
             "gemma3": gguf.MODEL_ARCH.GEMMA3, "olmo2": gguf.MODEL_ARCH.OLMO2,
             "smollm3": gguf.MODEL_ARCH.SMOLLM3, "gpt_oss": gguf.MODEL_ARCH.GPT_OSS,
             "deepseek2": gguf.MODEL_ARCH.DEEPSEEK2, "llama4": gguf.MODEL_ARCH.LLAMA4}
# What transformers' loader leaves out of a file's model (config fields, with what they say in
# the file) that llama.cpp computes: llama3rope's rope_freqs tensor (the loader rotates by the
# default frequencies); Gemma 3's rope.scaling.* (the loader leaves its global layers
# unscaled), and its query_pre_attn_scalar, which no key holds: llama.cpp takes head_dim's
# (27B aside), the loader Gemma3TextConfig's 256.
BEYOND_LOADER = {
    "llama3rope": {"rope_parameters": "rope_freqs"},
    "gemma3": {"rope_parameters": "rope.scaling.type and .factor",
               "query_pre_attn_scalar": "head_dim as the query's scale"},
}
# Architectures transformers 5.17's GGUF loader does not know (GGUF_CONFIG_MAPPING has no olmo2
# or smollm3): the reference is the source model with the file's values. Each entry: what
# llama.cpp takes that no key says, as {config field: (the value it would otherwise have,
# what it is)}, each checked to move the logits by more than 1e-2, or the test would not see
# it ignored.
NO_LOADER = {
    "gemma": {},
    "mixtral": {},
    "olmo2": {},
    "smollm3": {"no_rope_layers": ([1, 1, 1, 1], "the layer without RoPE (llama.cpp's "
                                                 "n_no_rope_layer_step 4)")},
    # transformers 5.17 knows gpt-oss files, but its loader fails on the converter's: it
    # takes float() of rope.scaling.factor's parts array ("only 0-dimensional arrays can be
    # converted to Python scalars"), and its GptOssTensorProcessor looks for ffn_*_projs
    # where the converter writes ffn_*_exps.
    "gpt_oss": {},
    "deepseek2": {},
    "llama4": {"use_qk_norm": (False, "q and k normalized (llama.cpp's use_kq_norm, for a "
                                      "file of other than 128 experts)")},
}
# The model_type transformers gives a file, where it is not ARCH.
LOADED_TYPE = {"llama3rope": "llama", "gemma3": "gemma3_text", "qwen3moe": "qwen3_moe",
               "qwen2moe": "qwen2_moe",
               "llama_q4_k_m": "llama", "llama_q5_k_m": "llama"}
# hf_model.py's name of the architecture whose tiny model a file holds, where it is not ARCH.
SOURCE = {"llama3rope": "llama", "qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe",
          "deepseek2": "deepseek_v2",
          "llama_q4_k_m": "llama",
          "llama_q5_k_m": "llama"}
# Gemma's norms, which the converter stores as 1 + w.
NORM_PLUS_ONE = ("gemma", "gemma2", "gemma3")


def permute(w, heads):
    """llama.cpp's LlamaModel.permute: each head's rows from (half, pair) to (pair, half)."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_freqs(c, head_dim):
    """The rope_freqs tensor llama.cpp's converter writes for llama3 scaling
    (LlamaModel.generate_extra_tensors): each pair's divisor of its frequency."""
    rp = c.rope_parameters
    factor, low, high = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    freqs = 1.0 / (rp["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float32)
                                        / head_dim))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            factors.append(1)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def add_yarn(writer, rope):
    """TextModel.set_gguf_parameters' keys for a YaRN rope_parameters."""
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(rope["factor"])
    writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    writer.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
    writer.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])


def converter_tensors(model, arch):
    """What llama.cpp's converter writes of MODEL: [(hf key, gguf-py's name of its module,
    suffix, value as stored)], each value before quantization, with what the converter did to it
    (the split of fused tensors, transposes, llama's q/k permutation, Gemma's 1 + w). A fused
    tensor's parts have keys "NAME[gate]" / "NAME[up]" (experts) or "NAME[k]" / "NAME[v]"
    (DeepSeek-V2's kv_b_proj); undo_converter() puts them back."""
    c = model.config
    names = gguf.get_tensor_name_map(GGUF_ARCH[arch], c.num_hidden_layers)
    tied = c.tie_word_embeddings
    tensors = []  # (hf name, gguf-py's name of its module, suffix, value)
    for hf, value in model.state_dict().items():
        if tied and hf == "lm_head.weight":
            continue
        w = value.detach().float().numpy()
        if arch == "llama4" and ".feed_forward.experts." in hf:
            # Llama4Model.modify_tensors: gate_up_proj [E, H, 2I] transposed to [E, 2I, H] and
            # split into its halves (gate, then up); down_proj [E, I, H] transposed.
            stem, leaf = hf.rsplit(".", 1)
            w = w.transpose(0, 2, 1)
            if leaf == "gate_up_proj":
                half = w.shape[1] // 2
                for part, rows in (("gate", w[:, :half]), ("up", w[:, half:])):
                    tensors.append((f"{hf}[{part}]", names.get_name(f"{stem}.{part}_proj"),
                                    "weight", np.ascontiguousarray(rows)))
            else:
                tensors.append((hf, names.get_name(stem + ".down_proj"), "weight",
                                np.ascontiguousarray(w)))
            continue
        if arch == "gpt_oss" and ".mlp.experts." in hf:
            # GptOssModel.modify_tensors: gate_up_proj [E, H, 2I] transposed to [E, 2I, H] and
            # split into its even (gate) and odd (up) rows, its bias likewise; down_proj
            # [E, I, H] transposed to [E, H, I].
            stem, leaf = hf.rsplit(".", 1)
            if leaf == "gate_up_proj":
                w = w.transpose(0, 2, 1)
            if leaf.startswith("gate_up_proj"):
                suffix = "bias" if leaf.endswith("_bias") else "weight"
                for half, rows in (("gate", w[..., ::2, :] if suffix == "weight" else w[..., ::2]),
                                   ("up", w[..., 1::2, :] if suffix == "weight" else w[..., 1::2])):
                    tensors.append((f"{hf}[{half}]", names.get_name(f"{stem}.{half}_proj"),
                                    suffix, np.ascontiguousarray(rows)))
            elif leaf == "down_proj":
                tensors.append((hf, names.get_name(stem + ".down_proj"), "weight",
                                np.ascontiguousarray(w.transpose(0, 2, 1))))
            else:
                tensors.append((hf, names.get_name(stem + ".down_proj"), "bias", w))
            continue
        if arch == "deepseek2" and hf.endswith("kv_b_proj.weight"):
            # DeepseekV2Model.modify_tensors: per head, the nope key rows transposed (attn_k_b
            # [H, kv_lora, nope]) and the value rows (attn_v_b [H, v, kv_lora]).
            stem = hf.rsplit(".", 1)[0]
            heads, nope = c.num_attention_heads, c.qk_nope_head_dim
            kv = w.reshape(heads, nope + c.v_head_dim, w.shape[-1])
            tensors.append((hf + "[k]", names.get_name(stem.replace("kv_b", "k_b")), "weight",
                            np.ascontiguousarray(kv[:, :nope].transpose(0, 2, 1))))
            tensors.append((hf + "[v]", names.get_name(stem.replace("kv_b", "v_b")), "weight",
                            np.ascontiguousarray(kv[:, nope:])))
            continue
        if hf.endswith(".mlp.shared_expert_gate.weight"):
            # Qwen2-MoE's [1, hidden] gate: llama.cpp's converter keeps it 2D, but transformers'
            # loader (Qwen2MoeTensorProcessor) adds a dimension to whatever it reads, so only a
            # vector, as older files hold it, loads; tpc reads both (gguf-llama-cpp-archs.test
            # has the converter's).
            tensors.append((hf, names.get_name(hf.rsplit(".", 1)[0]), "weight", w.reshape(-1)))
            continue
        if hf.endswith(".self_attn.sinks"):  # the converter's filter_tensors adds .weight
            tensors.append((hf, names.get_name(hf), "weight", w))
            continue
        if ".mlp.experts." in hf:
            # transformers' stacked experts, which the converter writes as gguf-py's 3D
            # ffn_{gate,up,down}_exps: gate_up_proj [E, 2I, H] as its gate half and its up half.
            stem = hf.rsplit(".", 1)[0]
            if hf.endswith("gate_up_proj"):
                half = w.shape[1] // 2
                tensors.append((hf + "[gate]", names.get_name(stem + ".gate_proj"), "weight",
                                np.ascontiguousarray(w[:, :half])))
                tensors.append((hf + "[up]", names.get_name(stem + ".up_proj"), "weight",
                                np.ascontiguousarray(w[:, half:])))
            else:
                tensors.append((hf, names.get_name(hf), "weight", w))
            continue
        stem, suffix = hf.rsplit(".", 1)
        tensors.append((hf, names.get_name(stem), suffix, w))
    out = []
    for hf, name, suffix, w in tensors:
        if name is None:
            raise SystemExit(f"gguf_models.py: {arch}: gguf-py has no name for {hf}")
        module = name.split(".")[-1]
        if arch in NORM_PLUS_ONE and hf.endswith("norm.weight"):
            w = w + np.float32(1)
        if arch in LLAMA_FILES and module in ("attn_q", "attn_k"):
            w = permute(w, c.num_attention_heads if module == "attn_q"
                        else c.num_key_value_heads)
        out.append((hf, name, suffix, w))
    return out


def undo_converter(arch, c, tensors, stored):
    """The Hugging Face values of what a file holds: STORED {hf key: the file's value of each
    entry of TENSORS (converter_tensors), dequantized, in its stored shape}, with the
    converter's changes undone."""
    expected = {}
    for hf, name, suffix, w in tensors:
        module = name.split(".")[-1]
        back = stored[hf]
        if arch in LLAMA_FILES and module in ("attn_q", "attn_k"):
            heads = c.num_attention_heads if module == "attn_q" else c.num_key_value_heads
            back = (back.reshape(heads, back.shape[0] // heads // 2, 2, *back.shape[1:])
                    .swapaxes(1, 2).reshape(back.shape))
        if arch in NORM_PLUS_ONE and hf.endswith("norm.weight"):
            back = back - np.float32(1)
        if hf.endswith(".mlp.shared_expert_gate.weight"):
            back = back.reshape(1, -1)
        expected[hf] = back
    for hf in [k for k in expected if k.endswith("[gate]")]:  # gate_up_proj: gate, then up
        fused = hf[:-len("[gate]")]
        gate, up = expected.pop(hf), expected.pop(fused + "[up]")
        if arch == "llama4":  # halves again, transposed back
            expected[fused] = np.concatenate([gate, up], 1).transpose(0, 2, 1)
            continue
        if arch != "gpt_oss":
            expected[fused] = np.concatenate([gate, up], 1)
            continue
        # GPT-OSS's: interleaved again (gate first) along the rows, and transposed back.
        axis = gate.ndim - 2 if fused.endswith("gate_up_proj") else gate.ndim - 1
        both = np.stack([gate, up], axis + 1)
        shape = list(gate.shape)
        shape[axis] *= 2
        both = both.reshape(shape)
        expected[fused] = both.transpose(0, 2, 1) if both.ndim == 3 else both
    for hf in [k for k in expected if k.endswith("[k]")]:  # kv_b_proj: each head's k, then v
        fused = hf[:-len("[k]")]
        k, v = expected.pop(hf), expected.pop(fused + "[v]")
        expected[fused] = np.concatenate([k.transpose(0, 2, 1), v], 1).reshape(-1, k.shape[1])
    if arch in ("gpt_oss", "llama4"):
        for hf in [k for k in expected if k.endswith(".experts.down_proj")]:
            expected[hf] = expected[hf].transpose(0, 2, 1)
    return expected


def write_gguf(model, arch, path):
    """MODEL as llama.cpp's converter writes it; returns {hf name: value as stored, read back
    and undone} for checking the loaded model."""
    c = model.config
    gguf_arch = GGUF_ARCH[arch]
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf_arch])
    # transformers (and tpc) call a llama file mistral when general.name is "mistral".
    writer.add_name("mistral" if arch == "mistral" else f"tiny-{arch}")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    if arch != "llama4":
        writer.add_feed_forward_length(c.intermediate_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_head_count(c.num_attention_heads)
    # DeepseekV2Model writes the latent attention as MQA (one KV head).
    writer.add_head_count_kv(1 if arch == "deepseek2" else c.num_key_value_heads)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    rope = getattr(c, "rope_parameters", None) or {}
    if arch == "gemma3":
        # TextModel.set_gguf_parameters: the global layers' theta and linear scaling, the
        # sliding layers' theta; Gemma3Model: the window (its pattern is not written).
        full = rope["full_attention"]
        writer.add_rope_freq_base(full["rope_theta"])
        writer.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
        if full.get("rope_type") == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(full["factor"])
        writer.add_sliding_window(c.sliding_window)
    elif rope.get("rope_theta") is not None:
        writer.add_rope_freq_base(rope["rope_theta"])
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if arch in LLAMA_FILES + ("phi3",):
        writer.add_rope_dimension_count(head_dim)
    if arch in LLAMA_FILES + ("qwen3", "qwen3moe", "gpt_oss") + NORM_PLUS_ONE:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch == "gemma2":
        writer.add_sliding_window(c.sliding_window)
        writer.add_attn_logit_softcapping(c.attn_logit_softcapping)
        writer.add_final_logit_softcapping(c.final_logit_softcapping)
    if arch in ("qwen3moe", "qwen2moe"):  # the converter's Qwen3MoeModel, Qwen2MoeModel
        writer.add_expert_count(c.num_experts)
        writer.add_expert_used_count(c.num_experts_per_tok)
        writer.add_expert_feed_forward_length(c.moe_intermediate_size)
    if arch == "qwen2moe":
        writer.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    if arch == "gpt_oss":
        # GptOssModel.set_gguf_parameters: the window, the experts' width; TextModel's expert
        # keys and its YaRN keys from rope_parameters (no key for truncate).
        writer.add_sliding_window(c.sliding_window)
        writer.add_expert_count(c.num_local_experts)
        writer.add_expert_used_count(c.num_experts_per_tok)
        writer.add_expert_feed_forward_length(c.intermediate_size)
        add_yarn(writer, rope)
    if arch == "llama4":
        # Llama4Model: feed_forward_length the dense layers' width, the experts' apart; its
        # LlamaModel's vocab_size and rope.dimension_count, TextModel's key/value lengths.
        writer.add_feed_forward_length(c.intermediate_size_mlp)
        writer.add_expert_feed_forward_length(c.intermediate_size)
        writer.add_interleave_moe_layer_step(c.interleave_moe_layer_step)
        writer.add_expert_count(c.num_local_experts)
        writer.add_expert_used_count(c.num_experts_per_tok)
        writer.add_vocab_size(c.vocab_size)
        writer.add_rope_dimension_count(head_dim)
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch == "deepseek2":
        # DeepseekV2Model.set_gguf_parameters (and TextModel's YaRN keys).
        writer.add_leading_dense_block_count(c.first_k_dense_replace)
        writer.add_vocab_size(c.vocab_size)
        writer.add_q_lora_rank(c.q_lora_rank)
        writer.add_kv_lora_rank(c.kv_lora_rank)
        writer.add_key_length(c.kv_lora_rank + c.qk_rope_head_dim)
        writer.add_value_length(c.kv_lora_rank)
        writer.add_key_length_mla(c.qk_nope_head_dim + c.qk_rope_head_dim)
        writer.add_value_length_mla(c.v_head_dim)
        writer.add_expert_feed_forward_length(c.moe_intermediate_size)
        writer.add_expert_count(c.n_routed_experts)
        writer.add_expert_used_count(c.num_experts_per_tok)
        writer.add_expert_shared_count(c.n_shared_experts)
        writer.add_expert_weights_scale(c.routed_scaling_factor)
        writer.add_rope_dimension_count(c.qk_rope_head_dim)
        add_yarn(writer, rope)
        writer.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])
    if arch == "mixtral":  # TextModel's expert keys; the experts are intermediate_size wide
        writer.add_expert_count(c.num_local_experts)
        writer.add_expert_used_count(c.num_experts_per_tok)
    # LlamaModel writes vocab_size (llama, smollm3); elsewhere the loaders count the tokens.
    if arch in LLAMA_FILES:
        writer.add_vocab_size(c.vocab_size)
    else:
        writer.add_token_list([f"<t{i}>" for i in range(c.vocab_size)])
    writer.add_bos_token_id(c.bos_token_id)
    writer.add_eos_token_id(c.eos_token_id)
    writer.add_pad_token_id(c.pad_token_id)

    tensors = converter_tensors(model, arch)
    stored = {}
    for hf, name, suffix, w in tensors:
        module = name.split(".")[-1]
        qtype = QUANT[arch].get(module, Q.F32) if w.ndim >= 2 and suffix == "weight" else Q.F32
        if isinstance(qtype, list):
            qtype = qtype[int(name.split(".")[1])]
        data = (kquants.quantize if qtype in kquants.WRITERS else quantize)(w, qtype)
        writer.add_tensor(f"{name}.{suffix}", data, raw_dtype=qtype)
        # What the file holds, as the Hugging Face value: the rounding and nothing else.
        stored[hf] = dequantize(data, qtype).reshape(w.shape)
    expected = undo_converter(arch, c, tensors, stored)
    if rope.get("rope_type") == "llama3":
        writer.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight",
                          llama3_rope_freqs(c, head_dim), raw_dtype=Q.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


def file_values(model, arch, path):
    """{hf key: value} of a GGUF file at PATH that llama.cpp's converter wrote from MODEL (and
    llama-quantize may have quantized): each tensor converter_tensors() names, read and
    dequantized by gguf-py, the converter's changes undone. A tensor it names that the file
    lacks, or one the file has beyond them (rope_freqs aside), fails here."""
    reader = gguf.GGUFReader(path)
    found = {t.name: t for t in reader.tensors}
    tensors = converter_tensors(model, arch)
    stored = {}
    for hf, name, suffix, w in tensors:
        t = found.pop(f"{name}.{suffix}", None)
        if t is None:
            raise SystemExit(f"gguf_models.py: {path} has no {name}.{suffix} ({hf})")
        stored[hf] = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(w.shape)
    found.pop("rope_freqs.weight", None)
    if found:
        raise SystemExit(f"gguf_models.py: {path} holds tensors the converter's model does not "
                         f"account for: {', '.join(sorted(found))}")
    return undo_converter(arch, model.config, tensors, stored)


def with_file_values(model, expected):
    """MODEL with every parameter the file's value (EXPECTED), for an architecture
    transformers' GGUF loader does not know: what the file holds, computed by transformers'
    modeling code."""
    m = copy.deepcopy(model)
    missing, unexpected = m.load_state_dict(
        {hf: torch.from_numpy(np.asarray(v, dtype=np.float32)) for hf, v in expected.items()},
        strict=False)
    tied = {"lm_head.weight"} if m.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise SystemExit(f"gguf_models.py: the file's values leave {missing} and add "
                         f"{unexpected}")
    state = m.state_dict()
    for hf, want in expected.items():
        if not np.array_equal(state[hf].numpy(), want):
            raise SystemExit(f"gguf_models.py: {hf} is not the file's value")
    if tied and m.lm_head.weight.data_ptr() != m.model.embed_tokens.weight.data_ptr():
        raise SystemExit("gguf_models.py: lm_head is no longer the embedding")
    m.set_attn_implementation("eager")
    return m.eval()


def make(arch, outdir):
    # KQUANT_ARCHS' rows are 8 times as long: a smaller spread keeps their logits about the
    # others' size, so that fp32's rounding stays well inside the tolerance.
    std = 0.06 if arch in KQUANT_ARCHS else 0.15
    model = hf_model.build(SOURCE.get(arch, arch), 0, std, OVERRIDES.get(arch))
    os.makedirs(outdir, exist_ok=True)
    name = f"{arch}.gguf"
    expected = write_gguf(model, arch, os.path.join(outdir, name))
    if arch in UNLOADABLE:
        print(f"{arch}: wrote {name}; no reference ({UNLOADABLE[arch]})")
        return
    if arch in NO_LOADER:
        loaded = with_file_values(model, expected)
        ids = torch.tensor([list(range(3, 3 + hf_model.PROMPT_LEN * 3))])
        for field, (other, what) in NO_LOADER[arch].items():
            cfg = copy.deepcopy(loaded.config)
            setattr(cfg, field, other)
            m = type(loaded)(cfg).to(torch.float32).eval()
            m.load_state_dict(loaded.state_dict())
            m.set_attn_implementation("eager")
            with torch.no_grad():
                apart = float((m(ids).logits - loaded(ids).logits).abs().max())
            if not apart > 1e-2:
                raise SystemExit(f"gguf_models.py: {arch}: {what} changes the logits by only "
                                 f"{apart:.3g}")
            print(f"{arch}: no key says {what} ({field}): without it the logits move by "
                  f"{apart:.3g}")
    else:
        loaded = load_with_transformers(arch, model, outdir, name, expected)
    write_reference(arch, outdir, name, expected, loaded)


def load_with_transformers(arch, model, outdir, name, expected):
    """transformers' GGUF loader's model of the file, its parameters checked against the
    file's values (and BEYOND_LOADER's fields the source checkpoint's)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    config = load_gguf_checkpoint(os.path.join(outdir, name))["config"]
    with open(os.path.join(outdir, "gguf_config.json"), "w") as f:
        json.dump(config, f, indent=1, default=str)

    loaded = transformers.AutoModelForCausalLM.from_pretrained(outdir, gguf_file=name,
                                                               dtype=torch.float32)
    loaded.set_attn_implementation("eager")
    loaded.eval()
    if loaded.config.model_type != LOADED_TYPE.get(arch, arch):
        raise SystemExit(f"gguf_models.py: {arch}: transformers loaded a "
                         f"{loaded.config.model_type} model")
    state = loaded.state_dict()
    for hf, want in expected.items():
        got = state.get(hf)
        if got is None or tuple(got.shape) != want.shape:
            raise SystemExit(f"gguf_models.py: {arch}: transformers loaded {hf} as "
                             f"{None if got is None else tuple(got.shape)}, not {want.shape}")
        diff = float(np.abs(got.float().numpy() - want).max())
        if not diff <= 1e-6:
            raise SystemExit(f"gguf_models.py: {arch}: {hf} loaded differs by {diff:.3g}")

    if arch in BEYOND_LOADER:
        # What transformers' GGUF loader does not read, where it then computes another model
        # than llama.cpp does from the file: the reference is the loaded model with the
        # checkpoint's value of each such field (what llama.cpp computes), and each must move
        # the logits, or the test would not see it ignored.
        ids = torch.tensor([list(range(3, 3 + hf_model.PROMPT_LEN * 3))])

        def patched(fields):
            cfg = copy.deepcopy(loaded.config)
            for field in fields:
                setattr(cfg, field, copy.deepcopy(getattr(model.config, field)))
            m = type(loaded)(cfg).to(torch.float32).eval()
            m.load_state_dict(state)
            m.set_attn_implementation("eager")
            return m

        for field, what in BEYOND_LOADER[arch].items():
            with torch.no_grad():
                apart = float((patched([field])(ids).logits - loaded(ids).logits).abs().max())
            if not apart > 1e-2:
                raise SystemExit(f"gguf_models.py: {arch}: {what} change the logits by only "
                                 f"{apart:.3g}")
            print(f"{arch}: the loader leaves out {what} ({field}): its logits move by "
                  f"{apart:.3g}")
        loaded = patched(BEYOND_LOADER[arch])
    return loaded


def write_reference(arch, outdir, name, expected, loaded):
    """LOADED's greedy tokens and teacher-forced logits for a prompt with clear margins."""
    best, best_key = None, None
    for attempt in range(hf_model.MAX_TRIES):
        g = torch.Generator().manual_seed(attempt)
        prompt = torch.randint(3, hf_model.VOCAB, (hf_model.PROMPT_LEN,), generator=g).tolist()
        r = hf_model.reference(loaded, prompt)
        r.update(prompt=prompt, attempt=attempt)
        # An MoE's routers too: no top k chosen by less than hf_model.py's gap.
        clear = (min(r["margins"]) >= 0.02 and r["argmax_same"]
                 and (r["router_gap"] is None or r["router_gap"] >= hf_model.MIN_ROUTER_GAP))
        key = (clear, len(set(r["greedy"])) >= hf_model.MIN_DISTINCT, min(r["margins"]))
        if best_key is None or key > best_key:
            best, best_key = r, key
        if all(key[:2]):
            break
    logits = best["logits"]
    if not torch.isfinite(logits).all():
        raise SystemExit(f"gguf_models.py: {arch}: non-finite logits")
    with open(os.path.join(outdir, "reference.bin"), "wb") as f:
        flat = logits.contiguous().view(-1).tolist()
        f.write(struct.pack("<%df" % len(flat), *flat))
    ref = {"arch": f"{arch} (GGUF {name})", "prompt": best["prompt"], "greedy": best["greedy"],
           "teacher_logits_file": "reference.bin", "vocab": int(logits.shape[-1]),
           "margins": [round(m, 6) for m in best["margins"]],
           "transformers": transformers.__version__, "torch": torch.__version__}
    with open(os.path.join(outdir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    for file, ids in (("prompt.txt", best["prompt"]), ("force.txt", best["greedy"])):
        with open(os.path.join(outdir, file), "w") as f:
            f.write(",".join(map(str, ids)) + "\n")
    gap = "" if best["router_gap"] is None else f" router gap {best['router_gap']:.3g}"
    print(f"{arch}: {len(expected)} tensors as written; greedy "
          f"{','.join(map(str, best['greedy']))} min margin {min(best['margins']):.3g}{gap} "
          f"(prompt try {best['attempt']})")


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    archs = sys.argv[2].split(",") if len(sys.argv) == 3 else ARCHS
    for arch in archs:
        if arch not in ARCHS + KQUANT_ARCHS:
            raise SystemExit(f"gguf_models.py: unknown arch {arch!r}; one of "
                             f"{', '.join(ARCHS + KQUANT_ARCHS)}")
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    for arch in archs:
        make(arch, os.path.join(sys.argv[1], arch))


if __name__ == "__main__":
    main()
