// What every part of the tokenizer reads text with: its two errors and how messages show a
// limit or a string of the file, UTF-8 of strings already known to be valid (and Rust's lossy
// reading of bytes that may not be), GPT-2's byte-level alphabet, and literal patterns found in
// linear time. Internal to runtime/tokenizer.
#ifndef TPCRT_TOKENIZER_TEXT_H
#define TPCRT_TOKENIZER_TEXT_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tpcrt {
// Not in an anonymous namespace: TokenizerImpl, declared in the public header, holds these
// types.
namespace tokenizer_detail {

/// A load error: the message names the file and the field at fault.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An encode error: text that is not valid UTF-8, or a regex limit the text ran into.
struct EncodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char *const kReplacement = "\xEF\xBF\xBD"; // U+FFFD

/// `what` of a limit for messages: "more than 4194304 entries (limit maxVocab)".
std::string beyond(uint64_t limit, const char *what, const char *name);

/// How much of a string of the file a message shows: all of it, or its first 40 bytes or so
/// when it is longer than 48.
size_t shownBytes(const std::string &s);
/// A string for a message: JSON-quoted, cut when long.
std::string shown(const std::string &s);

// --- UTF-8 ----------------------------------------------------------------------------------

/// The length of the UTF-8 sequence a lead byte starts (1 for stray bytes).
inline size_t utf8Len(unsigned char c) {
  if (c >= 0xF0 && c < 0xF8)
    return 4;
  if (c >= 0xE0)
    return c < 0xF0 ? 3 : 1;
  if (c >= 0xC0)
    return 2;
  return 1;
}

/// The length of the character at s[i] of a valid UTF-8 string.
inline size_t charLen(const std::string &s, size_t i) {
  return std::min(utf8Len(static_cast<unsigned char>(s[i])), s.size() - i);
}

/// The code point of the character s[i, i + n) of a valid UTF-8 string.
inline uint32_t codePointAt(const std::string &s, size_t i, size_t n) {
  auto c = static_cast<unsigned char>(s[i]);
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

/// Splits a valid UTF-8 string into its characters.
std::vector<std::string> utf8Chars(const std::string &s);
/// Where the character that ends at `end` of a valid UTF-8 string begins.
size_t charBefore(const std::string &s, size_t end);
/// The length of the whitespace character that ends at `end` (0 if none), whitespace as
/// Rust's char::is_whitespace says (added tokens' lstrip and rstrip take it).
size_t whitespaceBefore(const std::string &s, size_t end);
/// The length of the whitespace character that starts at `pos` (0 if none).
size_t whitespaceAt(const std::string &s, size_t pos);
/// Replaces every `from` (a few bytes) in s with `to`.
void replaceAll(std::string &s, const std::string &from, const std::string &to);

/// Bytes to text as Rust's String::from_utf8_lossy does it, a byte at a time: each maximal
/// invalid subsequence becomes one U+FFFD. Bytes that may still begin a valid character are
/// held until a later byte settles them; finish() turns them into one U+FFFD.
class Utf8Lossy {
public:
  /// Appends to `out` what `c` settles; false when that includes a U+FFFD.
  bool push(unsigned char c, std::string &out) {
    if (n_ == 0) {
      if (c < 0x80) {
        out += static_cast<char>(c);
        return true;
      }
      need_ = c >= 0xC2 && c <= 0xDF   ? 2
              : c >= 0xE0 && c <= 0xEF ? 3
              : c >= 0xF0 && c <= 0xF4 ? 4
                                       : 0;
      if (need_ == 0) {
        out += kReplacement;
        return false;
      }
      // The second byte's range rules out overlong forms, surrogates and code points past
      // U+10FFFF.
      lo_ = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
      hi_ = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
      held_[n_++] = static_cast<char>(c);
      return true;
    }
    if (c < lo_ || c > hi_) { // the held bytes are a maximal invalid subsequence
      n_ = 0;
      out += kReplacement;
      push(c, out);
      return false;
    }
    held_[n_++] = static_cast<char>(c);
    lo_ = 0x80;
    hi_ = 0xBF;
    if (n_ == need_) {
      out.append(held_, n_);
      n_ = 0;
    }
    return true;
  }
  /// Ends the bytes: what is held becomes one U+FFFD (false if there was any).
  bool finish(std::string &out) {
    if (n_ == 0)
      return true;
    n_ = 0;
    out += kReplacement;
    return false;
  }
  /// Bytes held: the beginning of a character not yet complete.
  size_t held() const { return n_; }

private:
  char held_[4] = {};
  size_t n_ = 0, need_ = 0;
  unsigned char lo_ = 0x80, hi_ = 0xBF;
};

// --- GPT-2's byte-level alphabet ------------------------------------------------------------

/// Each byte's printable stand-in: bytes that are printable Latin-1 stand for themselves, the
/// others for 256 + their order (so every stand-in is below U+0144).
struct ByteLevelTable {
  std::string byteToChar[256];
  int16_t charToByte[0x144]; // -1: a character that stands for no byte
  ByteLevelTable();
  /// The byte a character stands for, or -1.
  int byteOf(uint32_t cp) const { return cp < 0x144 ? charToByte[cp] : -1; }
};
const ByteLevelTable &byteLevel();

// --- Literal patterns -----------------------------------------------------------------------

/// A literal pattern (Replace, Split), found in time linear in the text however long the
/// pattern is (Knuth-Morris-Pratt): leftmost first and without overlaps, as Rust's
/// str::replace and the tokenizers library's literal patterns find it.
struct Literal {
  std::string text;           // never empty
  std::vector<uint32_t> fail; // fail[i]: the longest proper border of text[0, i]

  Literal() = default;
  explicit Literal(std::string s) : text(std::move(s)), fail(text.size(), 0) {
    for (size_t i = 1, k = 0; i < text.size(); ++i) {
      while (k > 0 && text[i] != text[k])
        k = fail[k - 1];
      if (text[i] == text[k])
        ++k;
      fail[i] = static_cast<uint32_t>(k);
    }
  }

  /// Every occurrence in s, as [begin, end) byte ranges.
  std::vector<std::pair<size_t, size_t>> findAll(const std::string &s) const {
    std::vector<std::pair<size_t, size_t>> out;
    size_t state = 0; // how much of the pattern the text read so far ends with
    for (size_t i = 0; i < s.size(); ++i) {
      while (state > 0 && text[state] != s[i])
        state = fail[state - 1];
      if (text[state] == s[i] && ++state == text.size()) {
        out.emplace_back(i + 1 - text.size(), i + 1);
        state = 0; // no overlaps
      }
    }
    return out;
  }

  std::string replaceAll(const std::string &s, const std::string &with) const {
    std::string out;
    size_t pos = 0;
    for (auto [b, e] : findAll(s)) {
      out.append(s, pos, b - pos).append(with);
      pos = e;
    }
    out.append(s, pos, std::string::npos);
    return out;
  }
};

} // namespace tokenizer_detail
} // namespace tpcrt

#endif // TPCRT_TOKENIZER_TEXT_H
