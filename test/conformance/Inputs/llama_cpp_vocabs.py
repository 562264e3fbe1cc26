"""tpc's GGUF tokenizers against llama.cpp's own tokenizer tests: the vocabulary-only GGUF
files llama.cpp ships in models/ (ggml-vocab-NAME.gguf), each with its test texts (.inp,
separated by __ggml_vocab_test__ lines) and the ids llama.cpp's test-tokenizer-0 expects for
them (.out, one line per text; no BOS, special tokens not parsed).

    python llama_cpp_vocabs.py TPC_TOKENIZE MODELS_DIR NAME...

Prints, per NAME, how many texts tpc-tokenize (batch mode, "special": false) encodes to
llama.cpp's ids, and the first few that differ; exits non-zero where any does.
"""
import json
import os
import subprocess
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    tool, models = sys.argv[1], sys.argv[2]
    bad = False
    for name in sys.argv[3:]:
        path = os.path.join(models, f"ggml-vocab-{name}.gguf")
        texts = open(path + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
        if texts and texts[-1] == "":
            texts.pop()
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
