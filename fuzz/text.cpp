// Fuzzes encoding, decoding and streaming with real vocabularies: the tokenizer directories
// listed in TPC_FUZZ_TOKENIZERS (colon-separated; scripts/fuzz.sh gives SmolLM2's and the
// tokenizers the conformance test trains: byte-level, byte fallback, Metaspace, NFC). The
// first byte picks the tokenizer and the mode:
//   - text: the rest is a prompt. Well-formed UTF-8 must encode to ids inside the
//     vocabulary, which then go through the decoding oracle (Text.h); anything else must be
//     refused with an error.
//   - ids: the rest is little-endian 16-bit values, mapped onto the vocabulary and a little
//     past it, decoded and streamed through the oracle: the model may emit any id.
#include "Text.h"

#include <cstdlib>
#include <cstring>

namespace {

const std::vector<std::unique_ptr<tpcrt::Tokenizer>> &tokenizers() {
  static const auto *loaded = [] {
    auto *out = new std::vector<std::unique_ptr<tpcrt::Tokenizer>>;
    const char *list = std::getenv("TPC_FUZZ_TOKENIZERS");
    if (!list || !*list) {
      std::fprintf(stderr, "TPC_FUZZ_TOKENIZERS names no tokenizer directory\n");
      std::exit(1);
    }
    std::string dirs = list;
    for (size_t begin = 0; begin <= dirs.size();) {
      size_t end = std::min(dirs.find(':', begin), dirs.size());
      std::string dir = dirs.substr(begin, end - begin), error;
      begin = end + 1;
      if (dir.empty())
        continue;
      std::unique_ptr<tpcrt::Tokenizer> tok = tpcrt::Tokenizer::load(dir, error);
      if (!tok) {
        std::fprintf(stderr, "%s\n", error.c_str());
        std::exit(1);
      }
      out->push_back(std::move(tok));
    }
    return out;
  }();
  return *loaded;
}

} // namespace

// The vocabularies load before the first input, whose time limit they would otherwise use.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const auto &all = tokenizers();
  if (size == 0)
    return 0;
  const tpcrt::Tokenizer &tok = *all[(data[0] >> 2) % all.size()];
  bool idsMode = data[0] & 1, addSpecial = data[0] & 2;
  ++data, --size;

  if (idsMode) {
    // Ids up to 16 past the end: the model's vocabulary can be larger than the tokenizer's.
    uint64_t span = uint64_t(tok.idEnd()) + 16;
    std::vector<int64_t> ids;
    for (size_t i = 0; i + 1 < size; i += 2)
      ids.push_back(int64_t((data[i] | (uint64_t(data[i + 1]) << 8)) * (span / 65536 + 1) %
                            span));
    tpc::fuzz::checkDecoding(tok, ids);
    return 0;
  }
  std::string text(reinterpret_cast<const char *>(data), size), error;
  std::optional<std::vector<int64_t>> ids = tok.encode(text, addSpecial, error);
  if (!tpc::fuzz::wellFormedUtf8(text)) {
    if (ids)
      tpc::fuzz::finding("ill-formed UTF-8 was encoded");
    if (error.empty())
      tpc::fuzz::finding("ill-formed UTF-8 refused without an error");
    return 0;
  }
  if (!ids) {
    std::fprintf(stderr, "%s\n", error.c_str());
    tpc::fuzz::finding("well-formed text refused");
  }
  for (int64_t id : *ids)
    if (id < 0 || id >= tok.idEnd())
      tpc::fuzz::finding("encode gave an id outside the vocabulary");
  tpc::fuzz::checkDecoding(tok, *ids);
  return 0;
}
