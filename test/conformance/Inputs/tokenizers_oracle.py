"""tpc's tokenizers (bin/tpc-tokenize) against transformers' AutoTokenizer.

`make OUT` trains small BPE vocabularies with the `tokenizers` library (a fixed corpus; the
trainer breaks ties between equally frequent characters in hash order, so ids can differ
from run to run, and both sides always read the same files) and writes one checkpoint-style directory per tokenizer class that
transformers rebuilds (LlamaTokenizer, GemmaTokenizer, Qwen2Tokenizer, GPT2Tokenizer), and
two whose tokenizer.json is used as it is (a Llama-3-style byte-level BPE with ignore_merges,
and the Llama vocabulary with its own Metaspace pipeline).
`make-gguf OUT` writes small GGUF files (metadata only, no tensors) with gguf-py's GGUFWriter:
of the llama architecture, SentencePiece-style "llama" vocabularies with scores and byte
tokens (merges built from the scores, by transformers as by tpc) and a byte-level "gpt2" one
with merges; of the qwen2 and qwen3moe architectures, byte-level ones with Qwen2's pattern,
for transformers' GGUF tokenizer converters (GGUFLlamaConverter, GGUFQwen2Converter).
`make-spm OUT` writes such files of a SentencePiece-style vocabulary with control and
user-defined tokens under gemma2, gemma3 and phi3, which tpc reads as llama.cpp does;
`compare-llama TPC_BIN LLAMA_BIN FILE...` compares tpc's ids with llama-tokenize's.
`compare TPC_BIN DIR...` encodes (with and without special tokens), decodes (with and without
skipping them) and stream-decodes a multilingual sample with both, and prints
`conform: NAME ok` or each difference.
"""
import json
import os
import subprocess
import sys

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

SP = "\u2581"
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Llama 4's (and GPT-4o's o200k): words split at case changes, contractions attached to the
# word before them, and "/" kept after punctuation runs.
LLAMA4_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                  r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                  r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                  r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                  r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! Hello there, how are you doing today?",
    "I'm sure you'll see they've done it; we'd like that.",
    "def main(argv):\n\tfor i in range(10):\n\t\tprint(i * 2)\n\treturn 0\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 65536",
    "안녕하세요 세계. 오늘 날씨가 좋네요.",
    "Café résumé naïve coöperate",
    "Tokenizers split text into pieces and merge them by rank.",
    "    indented    with    spaces    and\ttabs\t\there",
    "emoji 😀 party 🎉 thumbs 👍",
] * 20

SAMPLES = [
    "Hello world! This is a test.",
    "  leading spaces,   runs   of spaces and a trailing one ",
    "안녕하세요, 세계! 한국어 문장입니다.",
    "emoji 😀🎉👍🏽 family 👨\u200d👩\u200d👧 flags 🇰🇷",
    "def f(x):\n\tif x > 10:\n\t\treturn x * 2\n\treturn 0\n",
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 \u1100\u1161\u11a8",
    "numbers 1234567 3.14159 -42 1e10 0x1F",
    "I'm you'll they've DON'T We'D",
    "camelCaseWords HTTPServer XMLHttpRequest's path/to/file.txt a+/b ÉCOLE École",
    "日本語のテキストと中文",
    "\n\n\nnewlines\r\n and \u00a0 odd spaces\u3000here",
    "qxz qxz qxzqxz",
    "a \t<|eot_id|>\u00a0b\u3000<|eot_id|>\n word<|end_of_text|> w <|end_of_text|> x",
    "\U0001F600<|end_of_text|> \ud55c<|end_of_text|>\u0301 _<|end_of_text|>",
    "",
    " ",
]


def byte_tokens():
    return ["<0x%02X>" % b for b in range(256)]


def train_sentencepiece_style(specials):
    """A Llama-2-style BPE: Metaspace pieces, byte fallback, the 256 byte tokens after the
    special ones."""
    tok = Tokenizer(models.BPE(unk_token=specials[-1] if "<unk>" in specials else "<unk>",
                               byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, limit_alphabet=40,
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    data = json.loads(tok.to_str())
    # Byte tokens right after the special ones, as Llama's vocabulary has them.
    vocab = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    ordered = [t for t, _ in vocab[:len(specials)]] + byte_tokens() + \
        [t for t, _ in vocab[len(specials):] if t not in byte_tokens()]
    data["model"]["vocab"] = {t: i for i, t in enumerate(ordered)}
    for added in data["added_tokens"]:
        added["id"] = data["model"]["vocab"][added["content"]]
    return data


def train_byte_level(specials, pattern):
    tok = Tokenizer(models.BPE())
    if pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok, json.loads(tok.to_str())


def write(out, name, data, config):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    config = dict(config)
    config["added_tokens_decoder"] = {
        str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                         "single_word", "special")}
        for a in data["added_tokens"]}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


def make(out):
    llama = train_sentencepiece_style(["<unk>", "<s>", "</s>"])
    llama["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    write(out, "llama", llama, {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>",
                                "eos_token": "</s>", "unk_token": "<unk>",
                                "add_bos_token": True, "add_eos_token": False,
                                "legacy": False})
    # Added tokens matched in the normalized text, in their normalized form: "is a" is
    # "▁is▁a" there and matches "This is a"; "lo wor" is "▁lo▁wor" and
    # does not match "Hello world".
    llama_json = json.loads(json.dumps(llama))
    for i, content in enumerate(["is a", "lo wor"]):
        llama_json["added_tokens"].append({
            "id": len(llama_json["model"]["vocab"]) + i, "content": content,
            "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
            "special": False})
    write(out, "llama-json", llama_json, {"tokenizer_class": "TokenizersBackend",
                                     "bos_token": "<s>", "eos_token": "</s>",
                                     "unk_token": "<unk>"})

    # The Llama vocabulary with a Metaspace pre-tokenizer that splits, prepending always, and
    # its Metaspace decoder (newer tokenizer.json files of SentencePiece-style models).
    llama_meta = json.loads(json.dumps(llama))
    llama_meta["normalizer"] = None
    llama_meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": SP,
                                   "prepend_scheme": "always", "split": True}
    llama_meta["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": SP,
                                   "prepend_scheme": "always", "split": True}]}
    write(out, "llama-meta", llama_meta, {"tokenizer_class": "TokenizersBackend",
                                          "bos_token": "<s>", "eos_token": "</s>",
                                          "unk_token": "<unk>"})

    gemma = train_sentencepiece_style(["<pad>", "<eos>", "<bos>", "<unk>"])
    write(out, "gemma", gemma, {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>",
                                "eos_token": "<eos>", "unk_token": "<unk>",
                                "pad_token": "<pad>", "add_bos_token": True,
                                "add_eos_token": False})

    _, qwen2 = train_byte_level(["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                QWEN2_PATTERN)
    qwen2["normalizer"] = {"type": "NFC"}
    qwen2["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False,
                               "trim_offsets": False, "use_regex": False}
    write(out, "qwen2", qwen2, {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None,
                                "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                "unk_token": None})

    _, gpt2 = train_byte_level(["<|endoftext|>"], None)
    # GPT-2's own tokenizer.json spells merges as "a b" strings, newer files as pairs.
    gpt2["model"]["merges"] = [" ".join(m) for m in gpt2["model"]["merges"]]
    write(out, "gpt2", gpt2, {"tokenizer_class": "GPT2Tokenizer",
                              "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                              "unk_token": "<|endoftext|>"})

    _, llama3 = train_byte_level(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                                 LLAMA3_PATTERN)
    llama3["model"]["ignore_merges"] = True
    # Added tokens that take the whitespace around them, and one only between words.
    for added in llama3["added_tokens"]:
        added["lstrip"] = added["rstrip"] = added["content"] == "<|eot_id|>"
        added["single_word"] = added["content"] == "<|end_of_text|>"
    # A whole word no merge makes: only ignore_merges takes it in one piece.
    llama3["model"]["vocab"]["\u0120qxz"] = len(llama3["model"]["vocab"])
    llama3["post_processor"] = {
        "type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [0],
                                                      "tokens": ["<|begin_of_text|>"]}}}]}
    write(out, "llama3", llama3, {"tokenizer_class": "PreTrainedTokenizerFast",
                                  "bos_token": "<|begin_of_text|>",
                                  "eos_token": "<|eot_id|>"})

    # Llama 4's: byte-level with the o200k-style pattern and its header and turn tokens.
    _, llama4 = train_byte_level(["<|begin_of_text|>", "<|end_of_text|>", "<|header_start|>",
                                  "<|header_end|>", "<|eot|>"], LLAMA4_PATTERN)
    llama4["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [0],
                                                 "tokens": ["<|begin_of_text|>"]}}}
    write(out, "llama4", llama4, {"tokenizer_class": "PreTrainedTokenizerFast",
                                  "bos_token": "<|begin_of_text|>", "eos_token": "<|eot|>"})


def write_gguf(path, tokens, types, scores=None, merges=None, model="llama", extra=None,
               arch="llama", name="tiny"):
    """A metadata-only GGUF file of a vocabulary; EXTRA: {GGUFWriter method: value}."""
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    if types is not None:
        w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for key, value in (extra or {}).items():
        getattr(w, key)(value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_gguf(out):
    import gguf
    os.makedirs(out, exist_ok=True)

    llama = train_sentencepiece_style(["<unk>", "<s>", "</s>"])
    tokens = [t for t, _ in sorted(llama["model"]["vocab"].items(), key=lambda kv: kv[1])]
    tokens.append("<|user|>")  # a user-defined token: not special for transformers
    # Scores with ties (three tokens a score), so that the order among equals counts.
    scores = [-float(i // 3) for i in range(len(tokens))]
    types = [gguf.TokenType.UNKNOWN if t == "<unk>" else
             gguf.TokenType.CONTROL if t in ("<s>", "</s>") else
             gguf.TokenType.BYTE if t in byte_tokens() else
             gguf.TokenType.USER_DEFINED if t == "<|user|>" else gguf.TokenType.NORMAL
             for t in tokens]
    ids = {"add_add_bos_token": True, "add_add_eos_token": False, "add_bos_token_id": 1,
           "add_eos_token_id": 2, "add_unk_token_id": 0,
           "add_chat_template": "{% for m in messages %}{{ bos_token }}[{{ m.role }}] "
                                "{{ m.content }}{{ eos_token }}\n{% endfor %}"}
    write_gguf(os.path.join(out, "llama-spm.gguf"), tokens, types, scores=scores, extra=ids)
    # No token types (unk, bos and eos are the special ones), no space prefix.
    write_gguf(os.path.join(out, "llama-spm-noprefix.gguf"), tokens, None, scores=scores,
               extra=dict(ids, add_add_space_prefix=False))

    _, llama3 = train_byte_level(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                                 LLAMA3_PATTERN)
    tokens = [t for t, _ in sorted(llama3["model"]["vocab"].items(), key=lambda kv: kv[1])]
    types = [gguf.TokenType.CONTROL if t.startswith("<|") else gguf.TokenType.NORMAL
             for t in tokens]
    # Pre-tokenized with GPT-2's pattern, which transformers takes whatever the name says: a
    # name llama.cpp reads another way ("llama-bpe") tpc reads llama.cpp's way
    # (tokenizers-llama-cpp-vocabs.test).
    write_gguf(os.path.join(out, "llama3.gguf"), tokens, types, model="gpt2",
               merges=[" ".join(m) for m in llama3["model"]["merges"]],
               extra={"add_bos_token_id": 0, "add_eos_token_id": 2, "add_tokenizer_pre": "gpt-2"})

    # Qwen2.5-Instruct's metadata as llama.cpp's converter writes it: bos and padding
    # <|endoftext|>, eos <|im_end|>, add_bos_token false, and a ChatML template.
    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    _, qwen2 = train_byte_level(qwen_specials, QWEN2_PATTERN)
    tokens = [t for t, _ in sorted(qwen2["model"]["vocab"].items(), key=lambda kv: kv[1])]
    types = [gguf.TokenType.CONTROL if t in qwen_specials else gguf.TokenType.NORMAL
             for t in tokens]
    chatml = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
              "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    write_gguf(os.path.join(out, "qwen2.gguf"), tokens, types, model="gpt2", arch="qwen2",
               merges=[" ".join(m) for m in qwen2["model"]["merges"]],
               extra={"add_tokenizer_pre": "qwen2", "add_add_bos_token": False,
                      "add_bos_token_id": tokens.index("<|endoftext|>"),
                      "add_eos_token_id": tokens.index("<|im_end|>"),
                      "add_pad_token_id": tokens.index("<|endoftext|>"),
                      "add_chat_template": chatml})
    # qwen3moe (load_gguf_checkpoint renames it qwen3_moe; qwen2, qwen2moe, qwen3 and qwen3moe
    # get the same converter and tokenizer class), with add_space_prefix, which
    # Qwen2Converter's ByteLevel pre-tokenizer takes, and without <|im_start|>, which
    # transformers then numbers after the vocabulary.
    tokens = [t for t in tokens if t != "<|im_start|>"]
    write_gguf(os.path.join(out, "qwen3moe.gguf"), tokens,
               [gguf.TokenType.NORMAL] * len(tokens), model="gpt2", arch="qwen3moe", merges=[" ".join(m) for m in qwen2["model"]["merges"]],
               extra={"add_tokenizer_pre": "qwen2", "add_add_space_prefix": True,
                      "add_bos_token_id": tokens.index("<|endoftext|>"),
                      "add_eos_token_id": tokens.index("<|im_end|>")})


# llama.cpp's SentencePiece reading (the architectures where transformers builds another
# tokenizer than the model's: gemma's Unigram, phi3's BPE without spaces), checked against
# llama-tokenize on the same file. The vocabulary is the SentencePiece-style one above, with
# control tokens (some sharing a prefix, so the longest-first cut counts), user-defined ones
# and scores with ties.
SPM_SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|assistant|>"]
SPM_USER = ["<|user|>", "<ud>", "end_of", "x<|end"]
SPM_SAMPLES = SAMPLES + [
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "a<|end|>  \n b<|end|>\tc<|endoftext|>  d <|endoftext|>",
    "<|user|> x<s>y</s> z<unk>w",
    "<ud><ud>  <ud>x<|user|>\n",
    "the end_of the<end_of_turn>end_of_turn><|end|><|endoftext|>",
    "<|assistant|>\n\n  spaces  <|end|>\n",
    "<s>",
    "x<|endoftext|> x<|end|>x<|end",
    "only text, no specials at all: Hello world!",
    "\u00ff\u0100 \U0001F600 \u2581\u2581 rare\u2581marks \U00010000",
]


def make_spm(out):
    """GGUF files of a SentencePiece vocabulary under the architectures tpc reads the llama.cpp
    way, with the hyperparameters llama.cpp's vocab-only load asks of each."""
    import gguf
    os.makedirs(out, exist_ok=True)
    base = train_sentencepiece_style(["<unk>", "<s>", "</s>"] + SPM_SPECIALS)
    tokens = [t for t, _ in sorted(base["model"]["vocab"].items(), key=lambda kv: kv[1])]
    tokens += SPM_USER
    scores = [-float(i // 3) for i in range(len(tokens))]  # ties, three tokens a score
    types = [gguf.TokenType.UNKNOWN if t == "<unk>" else
             gguf.TokenType.CONTROL if t in ["<s>", "</s>"] + SPM_SPECIALS else
             gguf.TokenType.BYTE if t in byte_tokens() else
             gguf.TokenType.USER_DEFINED if t in SPM_USER else gguf.TokenType.NORMAL
             for t in tokens]
    # (file, architecture, general.name, add_space_prefix, add_bos, add_eos, scores): gemma2's
    # has none, so every pair ties (llama.cpp takes 0) and the leftmost merges first.
    for name, arch, title, prefix, bos, eos, with_scores in [
            ("gemma3.gguf", "gemma3", "tiny", False, True, False, True),
            ("gemma2.gguf", "gemma2", "tiny", None, True, True, False),
            ("phi3.gguf", "phi3", "Phi-3 tiny", None, None, None, True)]:
        extra = {"add_context_length": 256, "add_embedding_length": 64, "add_block_count": 1,
                 "add_feed_forward_length": 128, "add_head_count": 2, "add_head_count_kv": 1,
                 "add_key_length": 32, "add_value_length": 32, "add_layer_norm_rms_eps": 1e-6,
                 "add_rope_dimension_count": 32, "add_rope_freq_base": 10000.0,
                 "add_bos_token_id": 1, "add_eos_token_id": 2, "add_unk_token_id": 0}
        if arch != "phi3":
            extra["add_sliding_window"] = 64
        for key, value in (("add_add_space_prefix", prefix), ("add_add_bos_token", bos),
                           ("add_add_eos_token", eos)):
            if value is not None:
                extra[key] = value
        write_gguf(os.path.join(out, name), tokens, types, scores if with_scores else None,
                   extra=extra, arch=arch, name=title)


def llama_tokenize(llama_bin, path, text, bos):
    """llama-tokenize's ids for text (a file, read as it is: no escapes)."""
    import tempfile
    with tempfile.NamedTemporaryFile("wb", suffix=".txt") as f:
        f.write(text.encode())
        f.flush()
        cmd = [os.path.join(llama_bin, "llama-tokenize"), "-m", path, "-f", f.name, "--ids",
               "--no-escape", "--log-disable"] + ([] if bos else ["--no-bos"])
        r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("llama-tokenize %s: %s" % (path, r.stderr.decode()[-2000:]))
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def compare_llama(tpc_bin, llama_bin, paths):
    """Each sample, with and without BOS/EOS (llama-tokenize with and without --no-bos): tpc's
    ids equal llama-tokenize's."""
    for path in paths:
        requests, wants = [], []
        for text in SPM_SAMPLES:
            for add in (True, False):
                requests.append({"encode": text, "special": add})
                wants.append(llama_tokenize(llama_bin, path, text, add))
        gots = tpc(tpc_bin, path, requests)
        bad = [(q["encode"][:60], q["special"], got, want)
               for q, got, want in zip(requests, gots, wants) if got != want]
        for text, add, got, want in bad[:3]:
            print("  %r special=%s:\n    tpc   %s\n    llama %s" % (text, add, got, want))
        specials = sum(any(s in t for s in SPM_SPECIALS + SPM_USER) for t in SPM_SAMPLES)
        print("llama-tokenize: %s %s (%d texts, %d with special tokens, %d ids)" % (
            os.path.basename(path), "ok" if not bad else "%d differ" % len(bad),
            len(requests), 2 * specials, sum(len(w) for w in wants)))


def hf_tokenizer(d):
    from transformers import AutoTokenizer
    if d.endswith(".gguf"):
        return AutoTokenizer.from_pretrained(os.path.dirname(d), gguf_file=os.path.basename(d))
    return AutoTokenizer.from_pretrained(d)


def tpc(tpc_bin, d, requests):
    """Runs tpc-tokenize's batch mode: one JSON answer per request."""
    r = subprocess.run([os.path.join(tpc_bin, "tpc-tokenize"), d, "batch"],
                       input="".join(json.dumps(q) + "\n" for q in requests).encode(),
                       capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("tpc-tokenize %s: %s" % (d, r.stderr.decode()))
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def compare_gguf_extras(tpc_bin, path, hf):
    """The bos and eos strings a chat template sees, and the file's template rendered."""
    bad = []
    r = subprocess.run([os.path.join(tpc_bin, "tpc-tokenize"), path, "special-tokens"],
                       capture_output=True, check=True)
    got = json.loads(r.stdout)
    want = {"bos": hf.bos_token or "", "eos": hf.eos_token or ""}
    if got != want:
        bad.append("special tokens: tpc %r, transformers %r" % (got, want))
    if hf.chat_template:
        import tempfile
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "안녕하세요 <|im_end|> 😀"},
                    {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Bye"}]
        with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
            json.dump(messages, f)
            f.flush()
            r = subprocess.run([os.path.join(tpc_bin, "tpc-chat"), path, f.name,
                                "--bos", got["bos"], "--eos", got["eos"]], capture_output=True)
        want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if r.returncode != 0 or r.stdout.decode() != want:
            bad.append("chat template: tpc %r %s, transformers %r" % (
                r.stdout.decode(), r.stderr.decode(), want))
    return bad


def compare(tpc_bin, dirs):
    failed = False
    for d in dirs:
        name = os.path.basename(d.rstrip("/"))
        hf = hf_tokenizer(d)
        specials = [t for t in hf.all_special_tokens if t]
        samples = SAMPLES + ["".join(specials[:2]) + " text after " + " ".join(specials)
                             + "\nend"]
        if d.endswith(".gguf"):
            # Every added token, special or not (GGUFQwen2Converter's three, which only
            # <|endoftext|> of all_special_tokens names).
            added = [a.content for a in hf.added_tokens_decoder.values()]
            samples.append("".join(added) + " x" + "\n".join(added) + " e\u0301")
        requests, wants = [], []
        for text in samples:
            for add in (True, False):
                requests.append({"encode": text, "special": add})
                wants.append(hf(text, add_special_tokens=add)["input_ids"])
            ids = hf(text)["input_ids"]
            for skip in (False, True):
                text_out = hf.decode(ids, skip_special_tokens=skip)
                requests.append({"decode": ids, "skip": skip})
                wants.append(text_out)
                requests.append({"stream": ids, "skip": skip})
                wants.append(text_out)
        bad = []
        for q, got, want in zip(requests, tpc(tpc_bin, d, requests), wants):
            if "stream" in q:
                got = "".join(got)
            if got != want:
                bad.append("%s: tpc %r, transformers %r" % (json.dumps(q, ensure_ascii=False),
                                                            got, want))
        if d.endswith(".gguf"):
            bad += compare_gguf_extras(tpc_bin, d, hf)
        for line in bad:
            print("conform: %s: %s" % (name, line))
        print("conform: %s %s (%d texts)" % (name, "FAILED" if bad else "ok", len(samples)))
        failed = failed or bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "make-gguf":
        make_gguf(sys.argv[2])
    elif sys.argv[1] == "make-spm":
        make_spm(sys.argv[2])
    elif sys.argv[1] == "compare-llama":
        compare_llama(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3:]))
