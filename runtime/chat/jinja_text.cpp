// Text as templates see Python's str: the helpers of jinja_text.h that are more than a line.
#include "jinja_text.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace tpcrt::jinja {

int64_t countCodePoints(const std::string &s) {
  int64_t n = 0;
  for (char c : s)
    n += ((unsigned char)c & 0xC0) != 0x80;
  return n;
}

bool isSpaceCodePoint(uint32_t c) {
  if (c < 0x80)
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(const std::string &s, const std::string *chars, bool left, bool right) {
  std::vector<uint32_t> set; // the non-ASCII ones, sorted; the ASCII ones in a bitmap
  bool ascii[128] = {};
  if (chars) {
    for (size_t i = 0, n; i < chars->size(); i += n) {
      uint32_t cp = decodeAt(*chars, i, n);
      if (cp < 128)
        ascii[cp] = true;
      else
        set.push_back(cp);
    }
    std::sort(set.begin(), set.end());
  }
  auto drop = [&](uint32_t cp) {
    if (!chars)
      return isSpaceCodePoint(cp);
    return cp < 128 ? ascii[cp] : std::binary_search(set.begin(), set.end(), cp);
  };
  size_t b = 0, e = s.size(), n;
  while (left && b < e && drop(decodeAt(s, b, n)))
    b += n;
  while (right && e > b) {
    size_t start = previousStart(s, e);
    if (!drop(decodeAt(s, start, n)))
      break;
    e = start;
  }
  return s.substr(b, e - b);
}

// glibc's memmem is linear in the worst case (two-way search), where std::string::find can take
// the product of the lengths.
size_t findText(const std::string &hay, const std::string &needle, size_t from) {
  if (from > hay.size())
    return std::string::npos;
  if (needle.empty())
    return from;
  if (needle.size() == 1) { // the common case, without memmem's setup
    const void *hit = std::memchr(hay.data() + from, needle[0], hay.size() - from);
    return hit ? size_t(static_cast<const char *>(hit) - hay.data()) : std::string::npos;
  }
  const void *hit = memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return hit ? size_t(static_cast<const char *>(hit) - hay.data()) : std::string::npos;
}

std::string caseMap(std::string s, Case mode) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
  auto upper = [](char c) { return c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c; };
  auto alnum = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  };
  bool start = true;
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (mode == Case::Lower)
      s[k] = lower(c);
    else if (mode == Case::Upper)
      s[k] = upper(c);
    else if (mode == Case::Title)
      s[k] = start ? upper(c) : lower(c);
    else
      s[k] = k == 0 ? upper(c) : lower(c);
    start = !alnum(c);
  }
  return s;
}

bool isCase(const std::string &s, bool lower) {
  bool cased = false;
  for (char c : s) {
    bool l = c >= 'a' && c <= 'z', u = c >= 'A' && c <= 'Z';
    if (lower ? u : l)
      return false;
    cased = cased || l || u;
  }
  return cased;
}

} // namespace tpcrt::jinja
