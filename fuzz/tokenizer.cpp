// Fuzzes the tokenizer loader: the input is a tokenizer.json, optionally followed by a NUL and
// a tokenizer_config.json (seeds: the tests' tokenizers). What loads encodes a fixed
// multilingual sample, and the ids it gives go through the decoding oracle (Text.h): loading
// may fail with an error, nothing may crash, hang, or break the oracle.
#include "Text.h"

#include <cstring>

namespace {

// Every UTF-8 length, whitespace runs, a combining mark, digits, and the special tokens the
// test tokenizers name.
const char kSample[] = "Hello  world\t<s>caf\xC3\xA9 e\xCC\x81 \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 "
                       "\xF0\x9F\x98\x80 12345 <|im_end|>\n\n x";

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = tpc::fuzz::scratchDirectory();
  std::string_view input(reinterpret_cast<const char *>(data), size);
  size_t nul = input.find('\0');
  tpc::fuzz::writeFile(dir + "/tokenizer.json", input.substr(0, nul));
  std::string config = dir + "/tokenizer_config.json";
  if (nul != std::string_view::npos)
    tpc::fuzz::writeFile(config, input.substr(nul + 1));
  else
    std::remove(config.c_str());

  std::string error;
  std::unique_ptr<tpcrt::Tokenizer> tok = tpcrt::Tokenizer::load(dir, error);
  if (!tok) {
    if (error.empty())
      tpc::fuzz::finding("load failed without an error");
    return 0;
  }
  for (bool addSpecial : {false, true}) {
    std::optional<std::vector<int64_t>> ids = tok->encode(kSample, addSpecial, error);
    if (!ids) {
      if (error.empty())
        tpc::fuzz::finding("encode failed without an error");
      continue;
    }
    for (int64_t id : *ids)
      if (id < 0 || id >= tok->idEnd())
        tpc::fuzz::finding("encode gave an id outside the vocabulary");
    tpc::fuzz::checkDecoding(*tok, *ids);
  }
  return 0;
}
