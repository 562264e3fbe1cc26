"""tpc's GGUF tokenizers against llama.cpp's own tokenizer tests: the vocabulary-only GGUF
files llama.cpp ships in models/ (ggml-vocab-NAME.gguf), each with its test texts (.inp,
separated by __ggml_vocab_test__ lines) and the ids llama.cpp's test-tokenizer-0 expects for
them (.out, one line per text; no BOS, special tokens not parsed).

    python llama_cpp_vocabs.py TPC_TOKENIZE MODELS_DIR NAME...

Prints, per NAME, how many texts tpc-tokenize (batch mode, "special": false) encodes to
llama.cpp's ids, and the first few that differ; exits non-zero where any does.

    python llama_cpp_vocabs.py archs TPC_TOKENIZE LLAMA_BIN MODELS_DIR OUTDIR NAME:ARCH:PRE...

Rewrites vocabulary NAME's file as one of architecture ARCH whose tokenizer.ggml.pre is PRE
(gguf-py; vocabulary, merges, types, ids and flags as they are), then compares tpc-tokenize
with llama-tokenize (LLAMA_BIN) on every twelfth test text and texts around the vocabulary's
first control tokens, with BOS where the file asks for it, and two without (special tokens
parsed, as both do by default).
"""
import json
import os
import subprocess
import sys


def texts_of(path):
    texts = open(path + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    return texts


def rewrite(src, arch, pre, out):
    import gguf
    reader = gguf.GGUFReader(src)

    def value(key):
        field = reader.fields.get("tokenizer.ggml." + key)
        return None if field is None else field.contents()

    writer = gguf.GGUFWriter(out, arch)
    writer.add_tokenizer_model(value("model"))
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(value("tokens"))
    if value("token_type") is not None:
        writer.add_token_types(value("token_type"))
    if value("merges") is not None:
        writer.add_token_merges(value("merges"))
    for key, add in [("bos_token_id", writer.add_bos_token_id),
                     ("eos_token_id", writer.add_eos_token_id),
                     ("unknown_token_id", writer.add_unk_token_id),
                     ("padding_token_id", writer.add_pad_token_id)]:
        if value(key) is not None:
            add(int(value(key)))
    for key, add in [("add_bos_token", writer.add_add_bos_token),
                     ("add_eos_token", writer.add_add_eos_token)]:
        if value(key) is not None:
            add(bool(value(key)))
    # What llama.cpp's loader asks of any architecture, though only the vocabulary is read.
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(64)
    writer.add_head_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    types = value("token_type")
    tokens = value("tokens")
    return [t for t, k in zip(tokens, types if types is not None else [])
            if k == gguf.TokenType.CONTROL][:3]


def llama_tokenize(llama_bin, path, text, bos, tmp):
    with open(tmp, "wb") as f:
        f.write(text.encode())
    run = subprocess.run([os.path.join(llama_bin, "llama-tokenize"), "-m", path, "-f", tmp,
                          "--ids", "--no-escape", "--log-disable"] + ([] if bos else ["--no-bos"]),
                         capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"llama-tokenize {path}: {run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def archs(tool, llama_bin, models, outdir, specs):
    bad = False
    for spec in specs:
        name, arch, pre = spec.split(":")
        out = os.path.join(outdir, f"{name}-{arch}.gguf")
        specials = rewrite(os.path.join(models, f"ggml-vocab-{name}.gguf"), arch, pre, out)
        texts = texts_of(os.path.join(models, f"ggml-vocab-{name}.gguf"))[::12]
        marked = [f"{s}Hello{specials[-1]} 2024" for s in specials[:1]] + \
                 [f" x{s}\n{s}y" for s in specials[1:2]] + ["".join(specials)]
        requests, wants = [], []
        for text, bos in [(t, True) for t in texts + marked] + [(texts[1], False)] + \
                         [(t, False) for t in marked[:1]]:
            requests.append({"encode": text, "special": bos})
            wants.append(llama_tokenize(llama_bin, out, text, bos, out + ".txt"))
        run = subprocess.run([tool, out, "batch"], capture_output=True, text=True,
                             input="".join(json.dumps(q) + "\n" for q in requests))
        if run.returncode:
            print(f"{name} as {arch} ({pre}): tpc-tokenize failed: {run.stderr.strip()}")
            bad = True
            continue
        got = [json.loads(line) for line in run.stdout.splitlines()]
        differ = [i for i in range(len(requests)) if got[i] != wants[i]]
        print(f"{name} as {arch} ({pre}): {len(requests) - len(differ)} of {len(requests)} "
              f"as llama-tokenize ({len(marked) + 1} with special tokens, 2 without BOS)")
        for i in differ[:3]:
            print(f"  {requests[i]}: tpc {got[i]}, llama-tokenize {wants[i]}")
        bad |= bool(differ)
    sys.exit(1 if bad else 0)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "archs":
        if len(sys.argv) < 7:
            sys.exit(__doc__)
        return archs(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    tool, models = sys.argv[1], sys.argv[2]
    bad = False
    for name in sys.argv[3:]:
        path = os.path.join(models, f"ggml-vocab-{name}.gguf")
        texts = texts_of(path)
        expected = [[int(t) for t in line.split()]
                    for line in open(path + ".out", encoding="utf-8").read().split("\n")]
        lines = "".join(json.dumps({"encode": t, "special": False}) + "\n" for t in texts)
        run = subprocess.run([tool, path, "batch"], input=lines, capture_output=True, text=True)
        if run.returncode:
            print(f"{name}: tpc-tokenize failed: {run.stderr.strip()}")
            bad = True
            continue
        got = [json.loads(line) for line in run.stdout.splitlines()]
        differ = [i for i in range(len(texts)) if i >= len(got) or got[i] != expected[i]]
        print(f"{name}: {len(texts) - len(differ)} of {len(texts)} texts as llama.cpp")
        for i in differ[:3]:
            print(f"  {texts[i]!r}: tpc {got[i] if i < len(got) else None}, llama.cpp {expected[i]}")
        bad |= bool(differ) or len(texts) < 10
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
