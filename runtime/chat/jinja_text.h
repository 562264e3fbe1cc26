// Text as templates see Python's str. Inputs are validated as UTF-8 once; after that every
// string is valid UTF-8 and these helpers step through it by code points (Python's characters),
// never cutting one, so that what the engine builds stays valid UTF-8. Case mapping is ASCII's
// whatever the process's locale, so that a rendering does not depend on where it runs.
#ifndef TPCRT_CHAT_JINJA_TEXT_H
#define TPCRT_CHAT_JINJA_TEXT_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpcrt::jinja {

// The length of the UTF-8 sequence that `lead` begins.
inline size_t utf8Length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The code point at `i` of valid UTF-8, and its length in `len`.
inline uint32_t decodeAt(const std::string &s, size_t i, size_t &len) {
  unsigned char c = (unsigned char)s[i];
  len = utf8Length(c);
  if (len == 1)
    return c;
  uint32_t cp = c & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k)
    cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
  return cp;
}

// The start of the code point that ends just before `i` (> 0) in valid UTF-8.
inline size_t previousStart(const std::string &s, size_t i) {
  do
    --i;
  while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
  return i;
}

int64_t countCodePoints(const std::string &s);

// Python's str.isspace() for one code point (what strip() and split() drop).
bool isSpaceCodePoint(uint32_t c);

// The whitespace of the template's own syntax (between tokens, around tags).
inline bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.strip family: drops the code points in `chars` (whitespace when null) from the
// ends chosen. Linear in the text and the set.
std::string strip(const std::string &s, const std::string *chars, bool left, bool right);

// `needle` in `hay` from `from`, or npos; linear in the worst case.
size_t findText(const std::string &hay, const std::string &needle, size_t from = 0);

enum class Case { Lower, Upper, Title, Capitalize };

// str.lower(), upper(), title() or capitalize(), for ASCII letters.
std::string caseMap(std::string s, Case mode);

// Python's str.islower() (or isupper() when not `lower`), for ASCII letters: some cased letter,
// none of the other case.
bool isCase(const std::string &s, bool lower);

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_TEXT_H
