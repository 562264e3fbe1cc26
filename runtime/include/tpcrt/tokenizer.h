// Text to token ids and back, from a Hugging Face checkpoint's own tokenizer.json, as
// transformers 5.17's AutoTokenizer does it: BPE models (byte-level as GPT-2, Llama 3 and
// Qwen2 use; SentencePiece-style with byte fallback as Llama 2, Mistral and Gemma use), their
// normalizers, pre-tokenizers, decoders, added tokens and post-processor. Where
// tokenizer_config.json names a tokenizer class that transformers rebuilds from vocab and
// merges alone (LlamaTokenizer, GemmaTokenizer, Qwen2Tokenizer, GPT2Tokenizer), the
// components are that class's, as in transformers; otherwise tokenizer.json's.
//
// A checkpoint's tokenizer files come from the internet and a prompt from any user: neither
// is trusted. load() refuses a file past any of the TokenizerLimits, encode() refuses text
// that is not valid UTF-8 or that runs into a limit, each with an error naming what is at
// fault; nothing either holds makes them crash, hang or grow without bound.
#ifndef TPCRT_TOKENIZER_H
#define TPCRT_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

struct TokenizerImpl;
struct DecodeStream;
struct TokenizerBuilder;
class GgufFile;

/// Bounds on what tokenizer.json (and tokenizer_config.json) may make the tokenizer spend.
/// The defaults are generous for every real tokenizer the conformance tests know; past one,
/// load() (or encode(), for the regex limits) fails with an error that names the limit, e.g.
/// "tokenizer.json: model.vocab: more than 4194304 entries (limit maxVocab)".
struct TokenizerLimits {
  /// Bytes of tokenizer.json, and of tokenizer_config.json.
  uint64_t maxFileBytes = uint64_t(128) << 20;
  /// Nesting of JSON arrays and objects, checked before parsing (Sequence components nest).
  uint32_t maxJsonDepth = 64;
  /// Entries of model.vocab.
  uint64_t maxVocab = uint64_t(1) << 22;
  /// Entries of model.merges.
  uint64_t maxMerges = uint64_t(1) << 22;
  /// Added tokens: added_tokens and the special tokens tokenizer_config.json names.
  uint64_t maxAddedTokens = uint64_t(1) << 16;
  /// Bytes of all added tokens together (what the added-token matcher holds).
  uint64_t maxAddedTokenBytes = uint64_t(4) << 20;
  /// Bytes of one token (a vocabulary entry, an added token) and of one string of a component
  /// (a Replace pattern or content, a Prepend, a Split pattern, a regex).
  uint64_t maxTokenBytes = 4096;
  /// Normalizers, pre-tokenizers and decoders, each chain on its own; post-processor items
  /// and the ids they add.
  uint64_t maxComponents = 256;
  /// How much longer the normalizers and pre-tokenizers may make a text, and the decoders a
  /// token's text, in the worst case: an n-byte text at most maxTextGrowth * (n + 1) bytes.
  /// Checked at load from the components (a Replace whose content is longer than its pattern,
  /// a Prepend, NFC, the byte-level alphabet...), so that encode() and decode() cannot fail.
  uint64_t maxTextGrowth = 64;
  /// PCRE2's match limit for one match of a pre-tokenizer regex: its backtracking steps.
  uint32_t regexMatchLimit = 1000000;
  /// PCRE2's depth limit for one match: how deep its backtracking nests.
  uint32_t regexDepthLimit = 100000;
  /// PCRE2's heap limit for one match, in bytes: the memory its backtracking keeps.
  uint64_t regexHeapLimit = uint64_t(64) << 20;
  /// Regex steps one encode() may spend per byte of its text, all matches together, beyond
  /// three times regexMatchLimit (what one match may be charged): the regexes' work stays
  /// linear in the text. (PCRE2 tells only whether a match ran out of its limit, so each match
  /// starts with a limit of 32 that doubles while it runs out, and is charged the limits it tried.)
  uint64_t regexStepsPerByte = 256;
};

class Tokenizer {
public:
  /// Reads DIR/tokenizer.json (and DIR/tokenizer_config.json when present: tokenizer_class,
  /// the named special tokens, add_prefix_space, legacy; like transformers, not add_bos_token
  /// or add_eos_token, which it ignores when there is a tokenizer.json: BOS comes from the
  /// file's post-processor). Null, with `error` naming the file and the thing at fault, when
  /// it cannot or when the files exceed `limits`. Ids are integers in [0, 2^32), one string
  /// each; an added token has the id transformers gives it (its vocabulary entry's, or the
  /// next after the vocabulary), or the file is refused.
  static std::unique_ptr<Tokenizer> load(const std::string &dir, std::string &error,
                                         const TokenizerLimits &limits = TokenizerLimits());
  /// The tokenizer a GGUF file's metadata describes (tokenizer.ggml.*), as transformers 5.17
  /// builds it for from_pretrained(dir, gguf_file=...): for a llama-architecture file, a
  /// "llama" (SentencePiece-style BPE with byte fallback; merges from tokenizer.ggml.scores
  /// when the file has none) or "gpt2" (byte-level BPE) vocabulary, its control tokens special.
  /// The same checks and `limits` as load(); null, with `error` naming the metadata key at
  /// fault ("GGUF file X: tokenizer.ggml.merges[17]: ..."), for anything else.
  static std::unique_ptr<Tokenizer> fromGguf(const GgufFile &file, std::string &error,
                                             const TokenizerLimits &limits = TokenizerLimits());
  ~Tokenizer();

  /// Text to ids; `addSpecial` applies the post-processor (BOS etc.) as transformers'
  /// tokenizer(text) does by default. Null, with `error` saying why, when the text is not
  /// valid UTF-8 (transformers only ever sees Python strings; the error gives the byte offset
  /// of the first invalid byte) or a pre-tokenizer regex runs into its limits.
  std::optional<std::vector<int64_t>> encode(const std::string &text, bool addSpecial,
                                             std::string &error) const;
  /// Ids to text, as tokenizer.decode(ids, skip_special_tokens=skipSpecial): ids that name no
  /// token (negative, past the vocabulary) are skipped, as the tokenizers library does. Always
  /// valid UTF-8: bytes that are not become U+FFFD, as Rust's String::from_utf8_lossy does.
  std::string decode(const std::vector<int64_t> &ids, bool skipSpecial) const;

  /// Incremental decode for streaming: push ids one at a time; each call returns the text
  /// that no later id can change, finish() the rest. For every sequence of ids the
  /// concatenation is decode(ids, skipSpecial), every piece is valid UTF-8, and the work is
  /// linear in the ids. What push() holds back: the bytes of a character not yet complete; a
  /// run of byte-fallback tokens (<0xNN>) until a token that is not one ends it, since one
  /// invalid byte anywhere in a run turns each byte of the run into U+FFFD (tokenizers'
  /// ByteFallback) -- unless the run is invalid already, when each byte's U+FFFD comes at
  /// once; characters a Strip decoder may still remove from the end; the beginning of a
  /// Replace pattern that may still complete. finish() renders what is held as decode()
  /// would: bytes of an incomplete character become U+FFFD. Pushing after finish() begins a
  /// new text, as a fresh stream would. A stream must not outlive its tokenizer.
  ///
  /// One chain decodes the whole text at once: a ByteLevel decoder after the join (Fuse), as
  /// SmolLM2's tokenizer has, reads the text as bytes only if every character of it stands for
  /// a byte, so an exact stream holds all of it until the end. An `incremental` stream (what a
  /// server streams) reads such text as bytes as it comes, and takes the rest as it is from the
  /// first character that stands for no byte, as vLLM's detokenizer and transformers'
  /// streamers show it; it differs from decode() only for such a text.
  class Stream {
  public:
    Stream(Stream &&) noexcept;
    Stream &operator=(Stream &&) noexcept;
    ~Stream();
    std::string push(int64_t id);
    std::string finish();

  private:
    friend class Tokenizer;
    explicit Stream(std::unique_ptr<DecodeStream> state);
    std::unique_ptr<DecodeStream> state_;
  };
  Stream stream(bool skipSpecial, bool incremental = false) const;

  /// The id of a token string (added/special tokens included), if any: "<|im_end|>" -> 2.
  std::optional<int64_t> id(const std::string &token) const;
  /// The token string of an id, as transformers' convert_ids_to_tokens gives it: an added
  /// token's content, else the model's vocabulary entry as stored (a byte-level one with its
  /// "Ġ"); none for an id of neither.
  std::optional<std::string> token(int64_t id) const;
  /// How the token strings (token()) spell the text, as a grammar engine reads a vocabulary
  /// (xgrammar's VocabType): as they are (Raw); SentencePiece's ("\u2581" a space, "<0xAB>" a
  /// byte: ByteFallback); GPT-2's byte alphabet (ByteLevel). `prefixSpace`: the first token's
  /// leading space is dropped in decoding (a Metaspace or Strip decoder).
  struct VocabularyForm {
    enum Kind { Raw, ByteFallback, ByteLevel } kind = Raw;
    bool prefixSpace = false;
  };
  VocabularyForm vocabularyForm() const;
  /// One past the largest id encode() can give: of the vocabulary, the added tokens and the
  /// post-processor's special tokens (a model's embedding must hold [0, idEnd())).
  int64_t idEnd() const;
  /// bos/eos token strings from tokenizer_config.json when given, else the named class's
  /// defaults as transformers' tokenizer.bos_token has them ("" where neither says).
  const std::string &bosToken() const;
  const std::string &eosToken() const;

private:
  friend struct TokenizerBuilder; // load's and fromGguf's one builder (tokenizer_builder.h)
  Tokenizer();
  std::unique_ptr<TokenizerImpl> impl_;
};

} // namespace tpcrt

#endif // TPCRT_TOKENIZER_H
