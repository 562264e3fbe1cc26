// What a Tokenizer holds (TokenizerImpl) and what decodes its ids as a stream (DecodeStream).
// The parts of TokenizerImpl are loaded and run by the file of their kind: the BPE model in
// models.cpp, the added tokens in added_tokens.cpp, the pipeline's components through
// components.h; tokenizer.cpp runs them in order to encode, builder.cpp fills them from
// tokenizer.json. Internal to runtime/tokenizer.
#ifndef TPCRT_TOKENIZER_IMPL_H
#define TPCRT_TOKENIZER_IMPL_H

#include "components.h"
#include "tokenizer_builder.h"
#include "tpcrt/tokenizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tpcrt {
namespace tokenizer_detail {

/// The longest added token that starts at each position of a text, in time linear in the text
/// however many and however long the tokens are (added_tokens.cpp).
class AddedMatcher {
public:
  /// Patterns by index; among equal ones the first wins, empty ones never match.
  void build(const std::vector<std::string> &patterns);
  bool empty() const { return edges_.empty(); }
  /// out[i]: the index of the longest pattern that starts at byte i of text, or -1.
  void longestAt(const std::string &text, std::vector<int32_t> &out) const;
  /// Every pattern that starts at each byte of text (of equal ones the first): visit(i, index),
  /// from the last byte to the first, in time linear in the text and the matches.
  void allAt(const std::string &text, const std::function<void(size_t, int32_t)> &visit) const;

private:
  static uint64_t key(uint32_t node, unsigned char c) { return (uint64_t(node) << 8) | c; }
  /// The state after reading byte c (right to left) in `state`.
  uint32_t step(uint32_t state, unsigned char c) const;
  std::unordered_map<uint64_t, uint32_t> edges_; // (node, byte) -> child
  std::vector<uint32_t> fail_;
  std::vector<int32_t> best_, own_;
  std::vector<uint32_t> next_;
};

/// llama.cpp's SentencePiece encoding (llm_tokenizer_spm, tokenizer_st_partition), for the
/// GGUF architectures whose tokenizer transformers cannot build as the model's (spm.cpp):
/// special tokens cut out first, longest first, each raw stretch prefixed with a space and
/// merged by the scores of the tokens pairs of symbols make.
struct SentencePieceEncoder {
  std::unordered_map<std::string, uint32_t> ids; // token string -> id (a repeated one: its last)
  std::vector<float> scores;                     // by id
  struct Special {
    std::string text;
    uint32_t id;
    bool rstrip; // whitespace after it is dropped (llama.cpp's phi3 rule)
  };
  std::vector<Special> specials; // control, user-defined and unknown tokens, longest first
  AddedMatcher matcher;          // of the specials' texts, in that order
  std::vector<int64_t> byteIds;  // 256: the id of <0xXX> (or of the byte itself), else -1
  std::optional<uint32_t> unk, bos, eos;
  bool addSpacePrefix = true, addBos = true, addEos = false;

  /// Text to ids, BOS and EOS added where `addSpecial` and the file say. Valid UTF-8 only.
  std::vector<int64_t> encode(const std::string &text, bool addSpecial) const;

private:
  void encodeRaw(const std::string &text, std::vector<int64_t> &out) const;
};

// The stages DecodeStream runs the decoders as (decoders.cpp).
class TextStage;
class TokenStage;
class JoinStage;

} // namespace tokenizer_detail

struct TokenizerImpl {
  using json = tokenizer_detail::json;
  using Normalizer = tokenizer_detail::Normalizer;
  using PreTokenizer = tokenizer_detail::PreTokenizer;
  using Decoder = tokenizer_detail::Decoder;
  using PostItem = tokenizer_detail::PostItem;
  using AddedMatcher = tokenizer_detail::AddedMatcher;
  using RegexBudget = tokenizer_detail::RegexBudget;

  TokenizerLimits limits;
  std::string file; // tokenizer.json's path, for messages
  // The model.
  std::unordered_map<std::string, uint32_t> vocab;
  std::unordered_map<uint32_t, std::string> idToToken;
  // (a, b) -> (rank, merged). Ids are below 2^32, so a pair packs into a key exactly.
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges;
  bool byteFallback = false, fuseUnk = false, ignoreMerges = false;
  std::optional<uint32_t> unk;
  // Added tokens.
  struct Added {
    std::string content;
    uint32_t id;
    bool special, lstrip, rstrip, singleWord;
    bool normalized;     // matched in the normalized text, not the raw one
    std::string pattern; // what is matched: the content, normalized where `normalized` says
  };
  std::vector<Added> added;
  std::unordered_map<std::string, uint32_t> addedByContent;
  int64_t maxAdded = -1;                       // the largest added token id
  uint64_t addedBytes = 0;                     // of all added tokens' contents
  std::unordered_map<uint32_t, bool> addedIds; // id -> special
  // The matchers of the added tokens matched before and after normalization, and which added
  // token each of their patterns is.
  AddedMatcher rawMatcher, normalizedMatcher;
  std::vector<size_t> rawAdded, normalizedAdded;
  // The pipeline.
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> preTokenizers;
  bool hasDecoder = false; // without one, the tokenizers library joins the tokens with spaces
  std::vector<Decoder> decoders;
  std::vector<PostItem> post; // empty: ids as they are
  std::string bos, eos;
  int64_t idEnd = 0;
  // Set for a GGUF file read as llama.cpp reads it: encodes in place of the pipeline above,
  // which still decodes.
  std::shared_ptr<const tokenizer_detail::SentencePieceEncoder> sentencePiece;

  static uint64_t pairKey(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

  // The model (models.cpp).
  /// Reads tokenizer.json's model: a BPE model's vocabulary, merges and options.
  void loadModel(const json &model, const TokenizerSource &source);
  /// Appends the ids BPE merges a pre-tokenized piece into.
  void bpe(const std::string &word, std::vector<int64_t> &out) const;

  // The added tokens (added_tokens.cpp).
  /// Reads tokenizer.json's added_tokens (`list`, named `where` in errors).
  void loadAddedTokens(const json &list, const std::string &where);
  /// The id the tokenizers library gives an added token (AddedVocabulary::add_tokens): its
  /// vocabulary entry's, else that of an added token with the same content, else the next
  /// after the vocabulary and the added tokens so far.
  uint64_t addedIdFor(const std::string &content) const;
  /// Adds an added token, or refuses it: too many, too long, or an id other than the one
  /// transformers gives it (`fileId`, when the file gives one).
  void addToken(Added tok, std::optional<uint32_t> fileId, const std::string &where);
  /// Once the normalizers are known: each added token's pattern, and the two matchers.
  void buildMatchers();
  /// Cuts `text` at the added tokens of `matcher` (`which`: the added token each of its
  /// patterns is), as the tokenizers library's AddedVocabulary::find_matches does: the
  /// leftmost match, the longest there, then on after it (after the match, not after what
  /// rstrip took: a later match may start in that whitespace); a single_word token with a word
  /// character beside it is skipped (and the search goes on after it all the same); lstrip
  /// and rstrip take the whitespace around a match into it.
  /// `segment(begin, end)` gets the text between matches, `token(id)` each match.
  void splitAdded(const std::string &text, const AddedMatcher &matcher,
                  const std::vector<size_t> &which,
                  const std::function<void(size_t, size_t)> &segment,
                  const std::function<void(uint32_t)> &token) const;

  // Encoding (tokenizer.cpp).
  /// Text to ids, without the post-processor; an EncodeError when the text is not valid
  /// UTF-8 or runs into a regex limit.
  std::vector<int64_t> encode(const std::string &text) const;
  /// Normalizes a stretch of text between added tokens, cuts it at the added tokens matched
  /// after normalization, pre-tokenizes and merges the rest.
  void encodeSegment(const std::string &text, bool first, RegexBudget &budget,
                     std::vector<int64_t> &out) const;

  // Decoding (decoders.cpp).
  /// The token string an id decodes from, or null for an id that names none or a special
  /// token skipped.
  const std::string *tokenOf(int64_t id, bool skipSpecial) const;
};

/// A stream of decode: each decoder a stage (decoders.cpp).
struct DecodeStream {
  DecodeStream(const TokenizerImpl &tok, bool skipSpecial, bool incremental = false);
  ~DecodeStream();
  std::string push(int64_t id);
  std::string finish();

private:
  void build();
  std::string run(std::vector<std::string> toks, bool last);

  using TokenStage = tokenizer_detail::TokenStage;
  using JoinStage = tokenizer_detail::JoinStage;
  using TextStage = tokenizer_detail::TextStage;

  const TokenizerImpl &tok;
  bool skipSpecial;
  bool incremental; // ByteLevel after the join: see Tokenizer::Stream
  std::vector<std::unique_ptr<TokenStage>> tokenStages; // before the join
  std::unique_ptr<JoinStage> join;                      // null: the tokens are the text
  std::vector<std::unique_ptr<TextStage>> textStages;   // after it
  bool any = false;                                     // a token has come out
};

} // namespace tpcrt

#endif // TPCRT_TOKENIZER_IMPL_H
