// The out-of-line half of text.h (charLen and codePointAt, which every per-character loop
// calls, stay inline there). Internal to runtime/tokenizer.
#include "text.h"

#include "tpcrt/utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>

namespace tpcrt {
namespace tokenizer_detail {

namespace {

/// Whether a code point is whitespace as Rust's char::is_whitespace says (added tokens'
/// lstrip and rstrip take it).
bool isWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

} // namespace

std::string beyond(uint64_t limit, const char *what, const char *name) {
  return "more than " + std::to_string(limit) + " " + what + " (limit " + name + ")";
}

std::vector<std::string> utf8Chars(const std::string &s) {
  std::vector<std::string> out;
  for (size_t i = 0, n; i < s.size(); i += n) {
    n = charLen(s, i);
    out.push_back(s.substr(i, n));
  }
  return out;
}

size_t charBefore(const std::string &s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80)
    --b;
  return b;
}

size_t whitespaceBefore(const std::string &s, size_t end) {
  if (end == 0)
    return 0;
  size_t b = charBefore(s, end);
  return isWhitespace(codePointAt(s, b, end - b)) ? end - b : 0;
}

size_t whitespaceAt(const std::string &s, size_t pos) {
  if (pos >= s.size())
    return 0;
  size_t n = charLen(s, pos);
  return isWhitespace(codePointAt(s, pos, n)) ? n : 0;
}

void replaceAll(std::string &s, const std::string &from, const std::string &to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

size_t shownBytes(const std::string &s) {
  if (s.size() <= 48)
    return s.size();
  size_t cut = 40;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;
  return cut;
}

std::string shown(const std::string &s) {
  size_t n = shownBytes(s);
  return nlohmann::json(s.substr(0, n)).dump() + (n < s.size() ? "..." : "");
}

ByteLevelTable::ByteLevelTable() {
  std::fill(std::begin(charToByte), std::end(charToByte), int16_t(-1));
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    uint32_t cp = self ? b : 256 + next++;
    appendUtf8(byteToChar[b], cp);
    charToByte[cp] = static_cast<int16_t>(b);
  }
}

const ByteLevelTable &byteLevel() {
  static const ByteLevelTable table;
  return table;
}

} // namespace tokenizer_detail
} // namespace tpcrt
