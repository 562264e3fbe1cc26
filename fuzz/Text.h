// What the text fuzzers (tokenizer, text, template) share: a directory of this process for
// the files a checkpoint would hold, and a UTF-8 check of their own, written from the
// standard's table rather than taken from the code under test, for the oracles.
#ifndef TPC_FUZZ_TEXT_H
#define TPC_FUZZ_TEXT_H

#include "tpcrt/tokenizer.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace tpc::fuzz {

/// A directory of this process (in /dev/shm when there is one), made on the first call.
inline const std::string &scratchDirectory() {
  static const std::string dir = [] {
    std::string d = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                    std::string("/tpc-fuzz-text-") + std::to_string(getpid());
    mkdir(d.c_str(), 0700);
    return d;
  }();
  return dir;
}

inline void writeFile(const std::string &path, std::string_view bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    __builtin_trap(); // the harness itself is broken
  if (!bytes.empty())
    std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

/// Whether `s` is well-formed UTF-8 (Unicode 15, table 3-7: no overlongs, no surrogates,
/// nothing above U+10FFFF).
inline bool wellFormedUtf8(std::string_view s) {
  size_t i = 0;
  auto in = [&](size_t k, unsigned lo, unsigned hi) {
    return i + k < s.size() && static_cast<unsigned char>(s[i + k]) >= lo &&
           static_cast<unsigned char>(s[i + k]) <= hi;
  };
  while (i < s.size()) {
    unsigned c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    if (c < 0x80)
      n = 1;
    else if (c >= 0xC2 && c <= 0xDF && in(1, 0x80, 0xBF))
      n = 2;
    else if (c == 0xE0 && in(1, 0xA0, 0xBF) && in(2, 0x80, 0xBF))
      n = 3;
    else if (((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) && in(1, 0x80, 0xBF) &&
             in(2, 0x80, 0xBF))
      n = 3;
    else if (c == 0xED && in(1, 0x80, 0x9F) && in(2, 0x80, 0xBF))
      n = 3;
    else if (c == 0xF0 && in(1, 0x90, 0xBF) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF))
      n = 4;
    else if (c >= 0xF1 && c <= 0xF3 && in(1, 0x80, 0xBF) && in(2, 0x80, 0xBF) &&
             in(3, 0x80, 0xBF))
      n = 4;
    else if (c == 0xF4 && in(1, 0x80, 0x8F) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF))
      n = 4;
    else
      return false;
    i += n;
  }
  return true;
}

/// Fails the run: a broken oracle is a finding, like a crash.
[[noreturn]] inline void finding(const char *what) {
  std::fprintf(stderr, "oracle broken: %s\n", what);
  __builtin_trap();
}

/// The decoding oracle: decode gives well-formed UTF-8, and streaming the same ids gives
/// the same text in chunks that are each well-formed, with or without special tokens.
inline void checkDecoding(const tpcrt::Tokenizer &tok, const std::vector<int64_t> &ids) {
  for (bool skipSpecial : {false, true}) {
    std::string whole = tok.decode(ids, skipSpecial);
    if (!wellFormedUtf8(whole))
      finding("decode gave ill-formed UTF-8");
    tpcrt::Tokenizer::Stream stream = tok.stream(skipSpecial);
    std::string streamed;
    for (int64_t id : ids) {
      std::string chunk = stream.push(id);
      if (!wellFormedUtf8(chunk))
        finding("a streamed chunk is ill-formed UTF-8");
      streamed += chunk;
    }
    std::string rest = stream.finish();
    if (!wellFormedUtf8(rest))
      finding("the stream's last chunk is ill-formed UTF-8");
    if (streamed + rest != whole)
      finding("the streamed text differs from decode");
  }
}

} // namespace tpc::fuzz

#endif // TPC_FUZZ_TEXT_H
