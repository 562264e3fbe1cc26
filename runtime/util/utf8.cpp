// UTF-8 checked and written (tpcrt/utf8.h), per Unicode's table of well-formed byte sequences.
#include "tpcrt/utf8.h"

namespace tpcrt {

size_t firstInvalidUtf8(const std::string &s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; // the second byte's range
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c == 0xE0)
      len = 3, lo = 0xA0; // no overlong form
    else if (c == 0xED)
      len = 3, hi = 0x9F; // no surrogate
    else if (c >= 0xE1 && c <= 0xEF)
      len = 3;
    else if (c == 0xF0)
      len = 4, lo = 0x90; // no overlong form
    else if (c >= 0xF1 && c <= 0xF3)
      len = 4;
    else if (c == 0xF4)
      len = 4, hi = 0x8F; // nothing past U+10FFFF
    else
      return i;
    if (i + 1 >= n || static_cast<unsigned char>(s[i + 1]) < lo ||
        static_cast<unsigned char>(s[i + 1]) > hi)
      return i;
    for (size_t k = 2; k < len; ++k)
      if (i + k >= n || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        return i;
    i += len;
  }
  return std::string::npos;
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

} // namespace tpcrt
