"""How long tpc and llama.cpp take to cut special tokens out of a hostile text, on one GGUF
vocabulary read the SentencePiece way (a gemma3 file, written here with gguf-py: the byte
tokens, the characters of "<unused>" and 6000 user-defined <unusedN> tokens, as Gemma's
vocabulary has thousands). The text: "<unused" 150000 times (1 MB where every seventh byte
starts a near-match of every special token), then 100 real ones. llama.cpp searches the text
once per special token; tpc makes one Aho-Corasick pass (runtime/tokenizer/spm.cpp). Both
ids are compared, then each time is the best of 3 runs of the whole command (load included).

    PYTHONPATH=GGUF_PY python bench/spm_partition.py BUILD_BIN LLAMA_CPP_BIN OUTDIR
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test",
                                "conformance", "Inputs"))
from tokenizers_oracle import byte_tokens, write_gguf  # noqa: E402


def best(cmd, text_path, runs=3):
    times, out = [], None
    for _ in range(runs):
        start = time.monotonic()
        with open(text_path, "rb") as f:
            out = subprocess.run(cmd, stdin=f, capture_output=True, check=True).stdout
        times.append(time.monotonic() - start)
    return min(times), out


def main():
    tpc_bin, llama_bin, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    specials = ["<unused%d>" % i for i in range(6000)]
    tokens = ["<unk>", "<s>", "</s>"] + byte_tokens() + ["\u2581", "<", "u", "n", "s", "e", "d",
                                                         ">"] + specials
    types = [2, 3, 3] + [6] * 256 + [1] * 8 + [4] * len(specials)
    extra = {"add_context_length": 256, "add_embedding_length": 64, "add_block_count": 1,
             "add_feed_forward_length": 128, "add_head_count": 2, "add_head_count_kv": 1,
             "add_key_length": 32, "add_value_length": 32, "add_layer_norm_rms_eps": 1e-6,
             "add_rope_dimension_count": 32, "add_rope_freq_base": 10000.0,
             "add_sliding_window": 64, "add_bos_token_id": 1, "add_eos_token_id": 2,
             "add_unk_token_id": 0}
    path = os.path.join(out, "unused.gguf")
    write_gguf(path, tokens, types, [0.0] * len(tokens), extra=extra, arch="gemma3")
    text = os.path.join(out, "hostile.txt")
    with open(text, "w") as f:
        f.write("<unused" * 150000 + "<unused5999><unused12>" * 100)
    tpc_s, tpc_out = best([os.path.join(tpc_bin, "tpc-tokenize"), path, "encode", "--no-special"],
                          text)
    llama_s, llama_out = best([os.path.join(llama_bin, "llama-tokenize"), "-m", path, "--stdin",
                               "--ids", "--no-escape", "--log-disable", "--no-bos"], text)
    tpc_ids = tpc_out.decode().split()
    llama_ids = llama_out.decode().strip().splitlines()[-1].strip("[]").replace(",", " ").split()
    print("%d bytes, %d special tokens: ids %s (%d)" % (os.path.getsize(text), len(specials),
          "equal" if tpc_ids == llama_ids else "DIFFER", len(tpc_ids)))
    print("tpc-tokenize   %.2f s" % tpc_s)
    print("llama-tokenize %.2f s (%.1fx tpc's)" % (llama_s, llama_s / tpc_s))


if __name__ == "__main__":
    main()
