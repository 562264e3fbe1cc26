// The one builder behind Tokenizer::load and Tokenizer::fromGguf: a tokenizer from a parsed
// tokenizer.json and tokenizer_config.json, whether read from a checkpoint directory or built
// from a GGUF file's metadata, so that every check and limit applies to both. Internal to
// runtime/tokenizer.
#ifndef TPCRT_TOKENIZER_BUILDER_H
#define TPCRT_TOKENIZER_BUILDER_H

#include "tpcrt/tokenizer.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace tpcrt {

/// What errors name for each part of the JSON: where it came from.
struct TokenizerSource {
  std::string file;        // tokenizer.json's fields: "DIR/tokenizer.json"
  std::string configFile;  // tokenizer_config.json's: "DIR/tokenizer_config.json"
  std::string vocab;       // model.vocab: "DIR/tokenizer.json: model.vocab"
  std::string merges;      // model.merges, indexed by rank
  std::string addedTokens; // added_tokens, indexed
};

struct TokenizerBuilder {
  /// Null, with `error` naming the part at fault as `source` says, when the JSON describes no
  /// tokenizer tpc reads or exceeds `limits`.
  static std::unique_ptr<Tokenizer> build(const nlohmann::json &tokenizerJson,
                                          const nlohmann::json &config,
                                          const TokenizerSource &source,
                                          const TokenizerLimits &limits, std::string &error);
};

} // namespace tpcrt

#endif // TPCRT_TOKENIZER_BUILDER_H
