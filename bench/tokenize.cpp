// tpc-tokenize: libtpcrt's tokenizer from the command line, for tests that compare it with
// transformers. Text or ids come on stdin:
//   tpc-tokenize DIR encode [--no-special]   text -> ids, one line, space-separated
//   tpc-tokenize DIR decode [--skip-special] ids -> text, exactly
//   tpc-tokenize DIR stream [--skip-special] ids -> one JSON string per id pushed (the text
//                                             that became final), then finish()'s
//   tpc-tokenize DIR id TOKEN                 the id of a token string
//   tpc-tokenize DIR special-tokens           {"bos": bosToken(), "eos": eosToken()}
//   tpc-tokenize DIR batch                    JSON lines in, JSON lines out, one load for all:
//     {"encode": TEXT, "special": B} -> [ids] (or {"error": MESSAGE});
//     {"decode": [ids], "skip": B} -> TEXT;
//     {"stream": [ids], "skip": B} -> [chunk per id pushed, then finish()'s]
// DIR may also be a GGUF file, or a directory holding one and no safetensors (ggufPathOf): the
// tokenizer is then its metadata's (Tokenizer::fromGguf).
// Text that cannot be encoded (not valid UTF-8, a regex limit) is an error: exit status 1
// with the message on stderr, or, in batch mode, its {"error": ...} line.
#include "tpcrt/gguf.h"
#include "tpcrt/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

namespace {

int usage() {
  std::cerr << "usage: tpc-tokenize DIR|GGUF (encode [--no-special] | decode [--skip-special] | "
               "stream [--skip-special] | id TOKEN)\n";
  return 2;
}

std::vector<int64_t> readIds() {
  std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  for (char &c : all)
    if (c == ',')
      c = ' ';
  std::istringstream in(all);
  std::vector<int64_t> ids;
  for (int64_t v; in >> v;)
    ids.push_back(v);
  return ids;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3)
    return usage();
  std::string error;
  std::string ggufPath = tpcrt::ggufPathOf(argv[1], error);
  std::unique_ptr<tpcrt::Tokenizer> tok;
  if (!error.empty()) {
  } else if (!ggufPath.empty()) {
    if (auto file = tpcrt::GgufFile::open(ggufPath, error))
      tok = tpcrt::Tokenizer::fromGguf(*file, error);
  } else {
    tok = tpcrt::Tokenizer::load(argv[1], error);
  }
  if (!tok) {
    std::cerr << "tpc-tokenize: " << error << "\n";
    return 1;
  }
  std::string cmd = argv[2];
  bool flag = argc > 3 && (std::strcmp(argv[3], "--no-special") == 0 ||
                           std::strcmp(argv[3], "--skip-special") == 0);
  if (cmd == "encode") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    std::optional<std::vector<int64_t>> ids = tok->encode(text, !flag, error);
    if (!ids) {
      std::cerr << "tpc-tokenize: the text: " << error << "\n";
      return 1;
    }
    const char *sep = "";
    for (int64_t id : *ids) {
      std::cout << sep << id;
      sep = " ";
    }
    std::cout << "\n";
  } else if (cmd == "decode") {
    std::cout << tok->decode(readIds(), flag);
  } else if (cmd == "stream") {
    auto stream = tok->stream(flag);
    try { // dump() throws on invalid UTF-8: a chunk that ends inside a character
      for (int64_t id : readIds())
        std::cout << nlohmann::json(stream.push(id)).dump() << "\n";
      std::cout << nlohmann::json(stream.finish()).dump() << "\n";
    } catch (const nlohmann::json::exception &e) {
      std::cerr << "tpc-tokenize: a streamed chunk is not valid UTF-8: " << e.what() << "\n";
      return 1;
    }
  } else if (cmd == "batch") {
    using nlohmann::json;
    try {
      for (std::string line; std::getline(std::cin, line);) {
        json req = json::parse(line);
        if (req.contains("encode")) {
          std::optional<std::vector<int64_t>> ids =
              tok->encode(req["encode"].get<std::string>(), req.value("special", true), error);
          std::cout << (ids ? json(*ids) : json{{"error", error}}).dump();
        } else if (req.contains("decode")) {
          std::cout << json(tok->decode(req["decode"].get<std::vector<int64_t>>(),
                                        req.value("skip", false)))
                           .dump();
        } else {
          auto stream = tok->stream(req.value("skip", false));
          json chunks = json::array();
          for (int64_t id : req.at("stream").get<std::vector<int64_t>>())
            chunks.push_back(stream.push(id));
          chunks.push_back(stream.finish());
          std::cout << chunks.dump();
        }
        std::cout << std::endl;
      }
    } catch (const json::exception &e) { // a chunk ending inside a character fails dump()
      std::cerr << "tpc-tokenize: " << e.what() << "\n";
      return 1;
    }
  } else if (cmd == "special-tokens") {
    std::cout << nlohmann::json{{"bos", tok->bosToken()}, {"eos", tok->eosToken()}}.dump() << "\n";
  } else if (cmd == "id" && argc == 4) {
    auto id = tok->id(argv[3]);
    if (!id) {
      std::cerr << "tpc-tokenize: no token " << argv[3] << "\n";
      return 1;
    }
    std::cout << *id << "\n";
  } else {
    return usage();
  }
  return 0;
}
