// Text to token ids and back, from a Hugging Face checkpoint's own tokenizer.json, as
// transformers 5.17's AutoTokenizer does it: BPE models (byte-level as GPT-2, Llama 3 and
// Qwen2 use; SentencePiece-style with byte fallback as Llama 2, Mistral and Gemma use), their
// normalizers, pre-tokenizers, decoders, added tokens and post-processor. Where
// tokenizer_config.json names a tokenizer class that transformers rebuilds from vocab and
// merges alone (LlamaTokenizer, GemmaTokenizer, Qwen2Tokenizer, GPT2Tokenizer), the
// components are that class's, as in transformers; otherwise tokenizer.json's.
#ifndef TPCRT_TOKENIZER_H
#define TPCRT_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

struct TokenizerImpl;

class Tokenizer {
public:
  /// Reads DIR/tokenizer.json (and DIR/tokenizer_config.json when present: tokenizer_class,
  /// the named special tokens, add_prefix_space, legacy; like transformers, not add_bos_token
  /// or add_eos_token, which it ignores when there is a tokenizer.json: BOS comes from the
  /// file's post-processor). Null, with `error` naming the file and the thing at fault, when
  /// it cannot.
  static std::unique_ptr<Tokenizer> load(const std::string &dir, std::string &error);
  ~Tokenizer();

  /// Text to ids; `addSpecial` applies the post-processor (BOS etc.) as transformers'
  /// tokenizer(text) does by default.
  std::vector<int64_t> encode(const std::string &text, bool addSpecial) const;
  /// Ids to text, as tokenizer.decode(ids, skip_special_tokens=skipSpecial).
  std::string decode(const std::vector<int64_t> &ids, bool skipSpecial) const;

  /// Incremental decode for streaming: push ids one at a time; each call returns the text that
  /// is now final (never half a UTF-8 character: bytes of an unfinished character are held
  /// back), finish() returns the rest. The concatenation is decode(ids, skipSpecial).
  class Stream {
  public:
    std::string push(int64_t id);
    std::string finish();

  private:
    friend class Tokenizer;
    Stream(const Tokenizer &tok, bool skipSpecial) : tok_(&tok), skipSpecial_(skipSpecial) {}
    const Tokenizer *tok_;
    bool skipSpecial_;
    std::vector<int64_t> ids_;
    // The text of ids_[prefix_, read_) is already returned; ids_[prefix_, ...) is decoded
    // again with each new id, so that the decoder sees its context (a leading space stripped
    // once, the bytes of one character together).
    size_t prefix_ = 0, read_ = 0;
  };
  Stream stream(bool skipSpecial) const { return Stream(*this, skipSpecial); }

  /// The id of a token string (added/special tokens included), if any: "<|im_end|>" -> 2.
  std::optional<int64_t> id(const std::string &token) const;
  /// bos/eos token strings from tokenizer_config.json when given, else the named class's
  /// defaults as transformers' tokenizer.bos_token has them ("" where neither says).
  const std::string &bosToken() const;
  const std::string &eosToken() const;

private:
  Tokenizer();
  std::unique_ptr<TokenizerImpl> impl_;
};

} // namespace tpcrt

#endif // TPCRT_TOKENIZER_H
