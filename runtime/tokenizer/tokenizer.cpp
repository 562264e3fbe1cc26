// The BPE tokenizers of tpcrt/tokenizer.h. A pipeline as the `tokenizers` library runs it:
// added tokens are cut out of the text first (leftmost, the longest there), each remaining
// segment is normalized, pre-tokenized into pieces and each piece merged by BPE; the
// post-processor adds BOS/EOS. Decoding maps ids to token strings and runs the decoder chain
// over them, as a stream (decode() is a stream pushed all at once, so that the two always
// agree).
//
// tokenizer.json and the text are untrusted: every resource either controls is bounded by a
// TokenizerLimits field, text reaches PCRE2 and ICU only once it is known to be valid UTF-8,
// and costs are linear in the text (added-token matching, literal patterns, streaming) or
// n log n (BPE merges).
#include "tpcrt/tokenizer.h"

#include "tokenizer_builder.h"
#include "tpcrt/file.h"
#include "tpcrt/utf8.h"

#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <sys/stat.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <limits>
#include <map>
#include <queue>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_map>

namespace tpcrt {
// Not in an anonymous namespace: TokenizerImpl, declared in the header, holds these types.
namespace tokenizer_detail {

using json = nlohmann::json;

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
std::string beyond(uint64_t limit, const char *what, const char *name) {
  return "more than " + std::to_string(limit) + " " + what + " (limit " + name + ")";
}

// --- UTF-8 ----------------------------------------------------------------------------------

/// The length of the UTF-8 sequence a lead byte starts (1 for stray bytes).
size_t utf8Len(unsigned char c) {
  if (c >= 0xF0 && c < 0xF8)
    return 4;
  if (c >= 0xE0)
    return c < 0xF0 ? 3 : 1;
  if (c >= 0xC0)
    return 2;
  return 1;
}

/// The length of the character at s[i] of a valid UTF-8 string.
size_t charLen(const std::string &s, size_t i) {
  return std::min(utf8Len(static_cast<unsigned char>(s[i])), s.size() - i);
}

/// The code point of the character s[i, i + n) of a valid UTF-8 string.
uint32_t codePointAt(const std::string &s, size_t i, size_t n) {
  auto c = static_cast<unsigned char>(s[i]);
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

/// Splits a valid UTF-8 string into its characters.
std::vector<std::string> utf8Chars(const std::string &s) {
  std::vector<std::string> out;
  for (size_t i = 0, n; i < s.size(); i += n) {
    n = charLen(s, i);
    out.push_back(s.substr(i, n));
  }
  return out;
}

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

std::string utf8Lossy(const std::string &s) {
  Utf8Lossy d;
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s)
    d.push(c, out);
  d.finish(out);
  return out;
}

/// Whether a code point is whitespace as Rust's char::is_whitespace says (added tokens'
/// lstrip and rstrip take it).
bool isWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

/// Where the character that ends at `end` of a valid UTF-8 string begins.
size_t charBefore(const std::string &s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80)
    --b;
  return b;
}

/// The length of the whitespace character that ends at `end` (0 if none).
size_t whitespaceBefore(const std::string &s, size_t end) {
  if (end == 0)
    return 0;
  size_t b = charBefore(s, end);
  return isWhitespace(codePointAt(s, b, end - b)) ? end - b : 0;
}

/// The length of the whitespace character that starts at `pos` (0 if none).
size_t whitespaceAt(const std::string &s, size_t pos) {
  if (pos >= s.size())
    return 0;
  size_t n = charLen(s, pos);
  return isWhitespace(codePointAt(s, pos, n)) ? n : 0;
}

/// Replaces every `from` (a few bytes) in s with `to`.
void replaceAll(std::string &s, const std::string &from, const std::string &to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

/// How much of a string of the file a message shows: all of it, or its first 40 bytes or so
/// when it is longer than 48.
size_t shownBytes(const std::string &s) {
  if (s.size() <= 48)
    return s.size();
  size_t cut = 40;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;
  return cut;
}

/// A string for a message: JSON-quoted, cut when long.
std::string shown(const std::string &s) {
  size_t n = shownBytes(s);
  return json(s.substr(0, n)).dump() + (n < s.size() ? "..." : "");
}

// --- GPT-2's byte-level alphabet ------------------------------------------------------------

/// Each byte's printable stand-in: bytes that are printable Latin-1 stand for themselves, the
/// others for 256 + their order (so every stand-in is below U+0144).
struct ByteLevelTable {
  std::string byteToChar[256];
  int16_t charToByte[0x144]; // -1: a character that stands for no byte
  ByteLevelTable() {
    std::fill(std::begin(charToByte), std::end(charToByte), int16_t(-1));
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      uint32_t cp = self ? b : 256 + next++;
      appendUtf8(byteToChar[b], cp);
      charToByte[cp] = static_cast<int16_t>(b);
    }
  }
  /// The byte a character stands for, or -1.
  int byteOf(uint32_t cp) const { return cp < 0x144 ? charToByte[cp] : -1; }
};
const ByteLevelTable &byteLevel() {
  static const ByteLevelTable table;
  return table;
}

// GPT-2's pre-tokenization pattern, the ByteLevel pre-tokenizer's default.
const char *const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2Tokenizer's (transformers' PRETOKENIZE_REGEX in tokenization_qwen2.py).
const char *const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

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

// --- Regex (PCRE2, UTF and Unicode properties) -------------------------------------------

/// The regex steps one encode() may still spend (TokenizerLimits::regexStepsPerByte).
struct RegexBudget {
  uint64_t left;
  uint64_t total;
  size_t textBytes;
};

class Regex {
public:
  Regex(const std::string &pattern, const std::string &where) : where_(where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code_)
      throw LoadError(where + ": regex " + shown(pattern) + " does not compile at offset " +
                      std::to_string(off) + ": " + message(err));
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;

  /// Every non-overlapping match in s, which must be valid UTF-8, as [begin, end) byte
  /// ranges; an EncodeError when a match runs into one of the limits.
  std::vector<std::pair<size_t, size_t>>
  findAll(const std::string &s, const TokenizerLimits &limits, RegexBudget &budget) const {
    // Match data and context per call: a Tokenizer may encode on several threads at once.
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data *)> data(
        pcre2_match_data_create_from_pattern(code_, nullptr), pcre2_match_data_free);
    std::unique_ptr<pcre2_match_context, void (*)(pcre2_match_context *)> context(
        pcre2_match_context_create(nullptr), pcre2_match_context_free);
    if (!data || !context)
      throw std::bad_alloc();
    pcre2_set_depth_limit(context.get(), limits.regexDepthLimit);
    pcre2_set_heap_limit(context.get(), static_cast<uint32_t>(std::min<uint64_t>(
                                            std::max<uint64_t>(limits.regexHeapLimit / 1024, 1),
                                            std::numeric_limits<uint32_t>::max())));
    auto tooLong = [&] {
      return EncodeError(where_ + ": a match takes " +
                         beyond(limits.regexMatchLimit, "steps", "regexMatchLimit"));
    };
    auto spent = [&] {
      return EncodeError(where_ + ": a text of " + std::to_string(budget.textBytes) +
                         " bytes takes " +
                         beyond(budget.total, "regex steps", "regexStepsPerByte"));
    };
    std::vector<std::pair<size_t, size_t>> out;
    size_t pos = 0;
    while (pos <= s.size()) {
      // PCRE2 does not say how many steps a match took, only whether it ran out of its limit:
      // each match starts with a small limit that doubles while it runs out, and the budget
      // is charged every limit tried, at most four times what the match took (or the first
      // limit).
      uint64_t limit = std::min<uint64_t>({kFirstLimit, limits.regexMatchLimit, budget.left});
      int rc;
      for (;;) {
        if (limit == 0)
          throw limits.regexMatchLimit == 0 ? tooLong() : spent();
        pcre2_set_match_limit(context.get(), static_cast<uint32_t>(limit));
        // PCRE2_NO_UTF_CHECK: encode() checked the text, every step since keeps it valid and
        // `pos` is at a character boundary (checking again would cost the whole text for
        // each match).
        rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                         PCRE2_NO_UTF_CHECK, data.get(), context.get());
        budget.left -= limit;
        if (rc != PCRE2_ERROR_MATCHLIMIT)
          break;
        if (limit >= limits.regexMatchLimit)
          throw tooLong();
        if (budget.left == 0)
          throw spent();
        limit = std::min<uint64_t>({limit * 2, limits.regexMatchLimit, budget.left});
      }
      if (rc == PCRE2_ERROR_NOMATCH)
        break;
      if (rc == PCRE2_ERROR_DEPTHLIMIT)
        throw EncodeError(where_ + ": a match nests " +
                          beyond(limits.regexDepthLimit, "backtracking levels", "regexDepthLimit"));
      if (rc == PCRE2_ERROR_HEAPLIMIT)
        throw EncodeError(where_ + ": a match needs " +
                          beyond(limits.regexHeapLimit, "bytes", "regexHeapLimit"));
      if (rc < 0)
        throw EncodeError(where_ + ": " + message(rc));
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(data.get());
      size_t b = ov[0], e = ov[1];
      if (e == b) { // an empty match: step over one character
        pos = b + (b < s.size() ? charLen(s, b) : 1);
        continue;
      }
      out.emplace_back(b, e);
      pos = e;
    }
    return out;
  }

private:
  static constexpr uint64_t kFirstLimit = 32; // enough for most matches of real patterns

  static std::string message(int code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return reinterpret_cast<char *>(msg);
  }

  std::string where_; // the pattern's place in tokenizer.json, for messages
  pcre2_code *code_ = nullptr;
};

// --- Added tokens ---------------------------------------------------------------------------

/// The longest added token that starts at each position of a text, in time linear in the text
/// however many and however long the tokens are: an Aho-Corasick automaton of the reversed
/// tokens, run over the text backwards (a token that starts at i is one that ends at i of the
/// reversed text, and a node's output link gives the longest).
class AddedMatcher {
public:
  /// Patterns by index; among equal ones the first wins, empty ones never match.
  void build(const std::vector<std::string> &patterns) {
    best_.assign(1, -1);
    fail_.assign(1, 0);
    std::vector<uint32_t> parent(1, 0), depth(1, 0);
    std::vector<unsigned char> byte(1, 0);
    for (size_t p = 0; p < patterns.size(); ++p) {
      const std::string &s = patterns[p];
      if (s.empty())
        continue;
      uint32_t node = 0;
      for (size_t i = s.size(); i-- > 0;) {
        auto c = static_cast<unsigned char>(s[i]);
        auto [it, fresh] = edges_.emplace(key(node, c), static_cast<uint32_t>(best_.size()));
        if (fresh) {
          best_.push_back(-1);
          fail_.push_back(0);
          parent.push_back(node);
          depth.push_back(depth[node] + 1);
          byte.push_back(c);
        }
        node = it->second;
      }
      if (best_[node] < 0)
        best_[node] = static_cast<int32_t>(p);
    }
    // Failure links by depth, so that those of shallower nodes are known; a node's best is
    // its own pattern, else its failure node's (the longest suffix that is a pattern).
    std::vector<uint32_t> order(best_.size());
    for (uint32_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return depth[a] < depth[b]; });
    for (uint32_t v : order) {
      if (v == 0 || parent[v] == 0)
        continue; // the root's children fail to the root
      uint32_t f = fail_[parent[v]];
      for (;;) {
        auto it = edges_.find(key(f, byte[v]));
        if (it != edges_.end()) {
          fail_[v] = it->second;
          break;
        }
        if (f == 0)
          break;
        f = fail_[f];
      }
    }
    for (uint32_t v : order)
      if (v != 0 && best_[v] < 0)
        best_[v] = best_[fail_[v]];
  }

  bool empty() const { return edges_.empty(); }

  /// out[i]: the index of the longest pattern that starts at byte i of text, or -1.
  void longestAt(const std::string &text, std::vector<int32_t> &out) const {
    out.assign(text.size(), -1);
    uint32_t state = 0;
    for (size_t i = text.size(); i-- > 0;) {
      auto c = static_cast<unsigned char>(text[i]);
      for (;;) {
        auto it = edges_.find(key(state, c));
        if (it != edges_.end()) {
          state = it->second;
          break;
        }
        if (state == 0)
          break;
        state = fail_[state];
      }
      out[i] = best_[state];
    }
  }

private:
  static uint64_t key(uint32_t node, unsigned char c) { return (uint64_t(node) << 8) | c; }
  std::unordered_map<uint64_t, uint32_t> edges_; // (node, byte) -> child
  std::vector<uint32_t> fail_;
  std::vector<int32_t> best_;
};

// --- Components -------------------------------------------------------------------------

struct Normalizer {
  enum Kind { NFC, Replace, Prepend } kind;
  Literal pattern;  // Replace
  std::string text; // Replace: the content; Prepend: what is prepended
};

struct Piece {
  std::string text;
  bool first; // at offset 0 of the original text (Metaspace's prepend_scheme "first")
};

struct PreTokenizer {
  enum Kind { Split, ByteLevel, Metaspace } kind;
  // Split
  std::shared_ptr<Regex> regex; // null: split on `literal`
  Literal literal;
  std::string behavior; // isolated, removed, merged_with_previous, merged_with_next
  bool invert = false;
  // ByteLevel
  bool addPrefixSpace = false, useRegex = true;
  // Metaspace
  std::string replacement = "\xE2\x96\x81"; // one character
  std::string prependScheme = "always";
  bool split = true;
};

struct Decoder {
  enum Kind { Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel } kind;
  Literal pattern;     // Replace
  std::string content; // Replace: the replacement; Strip, Metaspace: one character
  uint64_t start = 0, stop = 0;
  bool prependNever = false; // Metaspace: prepend_scheme "never"
};

struct PostItem {
  bool isSequence; // $A, else special token ids
  std::vector<uint32_t> ids;
};

/// A component's type, cut when long (no type is) so that messages naming it stay short.
std::string kindOf(const json &j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return "";
  const std::string &s = j["type"].get_ref<const std::string &>();
  size_t n = shownBytes(s);
  return s.substr(0, n) + (n < s.size() ? "..." : "");
}

/// A string field of a JSON object, or a LoadError naming the file and the field.
std::string str(const json &j, const char *key, const std::string &where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    throw LoadError(where + "." + key + ": missing or not a string");
  return j[key].get<std::string>();
}

/// An optional field of a JSON object: `def` when absent or null, a LoadError naming the
/// field when it has another type.
template <typename T> T field(const json &j, const char *key, T def, const std::string &where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null())
    return def;
  const json &v = j[key];
  bool ok = std::is_same<T, bool>::value          ? v.is_boolean()
            : std::is_same<T, std::string>::value ? v.is_string()
                                                  : v.is_number_unsigned();
  if (!ok)
    throw LoadError(where + "." + key + ": not a " +
                    (std::is_same<T, bool>::value          ? "boolean"
                     : std::is_same<T, std::string>::value ? "string"
                                                           : "non-negative integer"));
  return v.get<T>();
}

/// An id in tokenizer.json: an integer in [0, 2^32), as the tokenizers library's u32 ids, or a
/// LoadError naming the field.
uint32_t idOf(const json &v, const std::string &where) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > std::numeric_limits<uint32_t>::max())
    throw LoadError(where + ": id " + v.dump() + " is not an integer in [0, 2^32)");
  return v.get<uint32_t>();
}

/// A string of a component, at most maxTokenBytes long.
std::string bounded(std::string s, const std::string &where, const TokenizerLimits &limits) {
  if (s.size() > limits.maxTokenBytes)
    throw LoadError(where + ": " + shown(s) + " is " + std::to_string(s.size()) + " bytes, " +
                    beyond(limits.maxTokenBytes, "bytes", "maxTokenBytes"));
  return s;
}

/// A string that must be one character (the tokenizers library reads it as a Rust char).
std::string oneChar(std::string s, const std::string &where) {
  if (s.empty() || charLen(s, 0) != s.size())
    throw LoadError(where + ": " + shown(s) + " is not one character");
  return s;
}

/// A Replace/Split pattern: {"String": s} or {"Regex": r}.
void pattern(const json &j, const std::string &where, const TokenizerLimits &limits,
             Literal &literal, std::shared_ptr<Regex> &regex) {
  if (!j.is_object())
    throw LoadError(where + ".pattern: missing or not an object");
  if (j.contains("String") && j["String"].is_string()) {
    std::string s = bounded(j["String"].get<std::string>(), where + ".pattern.String", limits);
    // The tokenizers library would match an empty pattern between every two characters.
    if (s.empty())
      throw LoadError(where + ".pattern.String: an empty pattern is not supported");
    literal = Literal(s);
  } else if (j.contains("Regex") && j["Regex"].is_string()) {
    regex = std::make_shared<Regex>(
        bounded(j["Regex"].get<std::string>(), where + ".pattern.Regex", limits),
        where + ".pattern");
  } else {
    throw LoadError(where + ".pattern: neither a String nor a Regex");
  }
}

/// The value of a byte-fallback token ("<0x41>" -> 0x41), or -1: six bytes, "<0x", two
/// digits u8::from_str_radix(.., 16) takes (so "+A" too) and ">", as the tokenizers
/// library's ByteFallback decoder reads them.
int byteTokenValue(const std::string &t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>')
    return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  if (t[3] == '+' && lo >= 0)
    return lo;
  return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

// --- Decoding, as a stream --------------------------------------------------------------------
//
// Each decoder of the chain is a stage that takes its input as it comes and passes on what no
// later input can change. Tokens go from stage to stage until the first one that joins them
// into one (Fuse, ByteLevel); every stage after it sees that one token, the text, in pieces.
// Before the join, Replace, Strip and Metaspace see each token whole, as a text of its own.

/// A decoder that reads a text: the one text after the join, or each token before it.
class TextStage {
public:
  virtual ~TextStage() = default;
  /// Starts a text; `first` when it is the chain's first token (Metaspace's token 0).
  virtual void reset(bool first) = 0;
  /// Appends to `out` what `in` settles.
  virtual void push(const std::string &in, std::string &out) = 0;
  /// Ends the text: appends what is held as the decoder renders it at the end.
  virtual void finish(std::string &out) = 0;
};

/// Replace (a literal, as the tokenizers library only reads a String pattern here): holds the
/// beginning of the pattern while the text may still complete it.
class ReplaceStage : public TextStage {
public:
  explicit ReplaceStage(const Decoder &d) : d_(d) {}
  void reset(bool) override { state_ = 0; }
  void push(const std::string &in, std::string &out) override {
    const Literal &p = d_.pattern;
    for (char c : in) {
      while (state_ > 0 && p.text[state_] != c) { // what is held stops being a match's start
        size_t f = p.fail[state_ - 1];
        out.append(p.text, 0, state_ - f);
        state_ = f;
      }
      if (p.text[state_] != c) {
        out += c;
      } else if (++state_ == p.text.size()) {
        out += d_.content;
        state_ = 0;
      }
    }
  }
  void finish(std::string &out) override {
    out.append(d_.pattern.text, 0, state_);
    state_ = 0;
  }

private:
  const Decoder &d_;
  size_t state_ = 0; // bytes of the pattern held
};

/// Strip: up to `start` of the character at the beginning, up to `stop` at the end. Holds a
/// run of the character at the end, up to `stop` of them. (Where the two overlap, the
/// tokenizers library panics; here the text is empty.)
class StripStage : public TextStage {
public:
  explicit StripStage(const Decoder &d) : d_(d) {}
  void reset(bool) override {
    leading_ = true;
    stripped_ = held_ = 0;
  }
  void push(const std::string &in, std::string &out) override {
    const std::string &c = d_.content;
    for (size_t i = 0, n; i < in.size(); i += n) {
      n = charLen(in, i);
      bool isContent = n == c.size() && in.compare(i, n, c) == 0;
      if (leading_) {
        if (isContent && stripped_ < d_.start) {
          ++stripped_;
          continue;
        }
        leading_ = false;
      }
      if (isContent) {
        if (held_ < d_.stop)
          ++held_;
        else
          out += c; // the run is longer than `stop`: its first ones stay
        continue;
      }
      for (; held_ > 0; --held_)
        out += c;
      out.append(in, i, n);
    }
  }
  void finish(std::string &) override { held_ = 0; }

private:
  const Decoder &d_;
  bool leading_ = true;
  uint64_t stripped_ = 0, held_ = 0;
};

/// Metaspace: the replacement character is a space again, except in the chain's first token,
/// where the tokenizers library drops every one (unless prepend_scheme is "never").
class MetaspaceStage : public TextStage {
public:
  explicit MetaspaceStage(const Decoder &d) : d_(d) {}
  void reset(bool first) override { drop_ = first && !d_.prependNever; }
  void push(const std::string &in, std::string &out) override {
    std::string s = in;
    replaceAll(s, d_.content, drop_ ? "" : " ");
    out += s;
  }
  void finish(std::string &) override {}

private:
  const Decoder &d_;
  bool drop_ = false;
};

/// ByteFallback after the join: the one token is a byte only when the whole text is "<0xNN>",
/// so the first seven bytes are held.
class ByteFallbackTextStage : public TextStage {
public:
  void reset(bool) override {
    held_.clear();
    passing_ = false;
  }
  void push(const std::string &in, std::string &out) override {
    if (passing_) {
      out += in;
      return;
    }
    held_ += in;
    if (held_.size() > 6) {
      out += held_;
      held_.clear();
      passing_ = true;
    }
  }
  void finish(std::string &out) override {
    int v = passing_ ? -1 : byteTokenValue(held_);
    if (v >= 0)
      out += v < 0x80 ? std::string(1, static_cast<char>(v)) : std::string(kReplacement);
    else
      out += held_;
    held_.clear();
  }

private:
  std::string held_;
  bool passing_ = false;
};

/// Whether every character of a token stands for a byte of the byte-level alphabet.
bool allByteLevel(const std::string &t) {
  for (size_t i = 0, n; i < t.size(); i += n) {
    n = charLen(t, i);
    if (byteLevel().byteOf(codePointAt(t, i, n)) < 0)
      return false;
  }
  return true;
}

/// A token's bytes as the ByteLevel decoder reads it: the bytes its characters stand for when
/// all of them stand for one, else the token as it is.
void byteLevelBytes(const std::string &t, Utf8Lossy &lossy, std::string &out) {
  if (!allByteLevel(t)) {
    for (unsigned char c : t)
      lossy.push(c, out);
    return;
  }
  for (size_t i = 0, n; i < t.size(); i += n) {
    n = charLen(t, i);
    lossy.push(static_cast<unsigned char>(byteLevel().byteOf(codePointAt(t, i, n))), out);
  }
}

/// ByteLevel after the join: the one token is all of the text, taken as it is when one of its
/// characters stands for no byte, so the text is held until one does or it ends.
/// Incremental (Tokenizer::stream's): read as bytes as it comes, until a character that stands
/// for no byte, from which the text is taken as it is.
class ByteLevelTextStage : public TextStage {
public:
  explicit ByteLevelTextStage(bool incremental) : incremental_(incremental) {}
  void reset(bool) override {
    held_.clear();
    raw_ = false;
    lossy_ = Utf8Lossy();
  }
  void push(const std::string &in, std::string &out) override {
    if (!raw_ && allByteLevel(in)) {
      if (incremental_)
        byteLevelBytes(in, lossy_, out);
      else
        held_ += in;
      return;
    }
    raw_ = true;
    lossy_.finish(out); // incremental: a character its bytes left incomplete
    out += held_;
    out += in;
    held_.clear();
  }
  void finish(std::string &out) override {
    byteLevelBytes(held_, lossy_, out);
    lossy_.finish(out);
    held_.clear();
  }

private:
  bool incremental_;
  std::string held_;
  bool raw_ = false;
  Utf8Lossy lossy_;
};

/// A decoder before the join: tokens in, tokens out.
class TokenStage {
public:
  virtual ~TokenStage() = default;
  virtual void push(std::string tok, std::vector<std::string> &out) = 0;
  virtual void finish(std::vector<std::string> &out) = 0;
};

/// Replace, Strip or Metaspace before the join: each token on its own.
class EachToken : public TokenStage {
public:
  explicit EachToken(std::unique_ptr<TextStage> stage) : stage_(std::move(stage)) {}
  void push(std::string tok, std::vector<std::string> &out) override {
    std::string text;
    stage_->reset(first_);
    stage_->push(tok, text);
    stage_->finish(text);
    out.push_back(std::move(text));
    first_ = false;
  }
  void finish(std::vector<std::string> &) override {}

private:
  std::unique_ptr<TextStage> stage_;
  bool first_ = true;
};

/// ByteFallback: a run of byte tokens becomes the text of its bytes when they are valid UTF-8,
/// else one U+FFFD per byte. A valid run is held until it ends; once invalid, it stays so, and
/// each byte's U+FFFD is final at once.
class ByteFallbackStage : public TokenStage {
public:
  void push(std::string tok, std::vector<std::string> &out) override {
    int v = byteTokenValue(tok);
    if (v < 0) {
      finish(out);
      out.push_back(std::move(tok));
      return;
    }
    if (invalid_) {
      out.emplace_back(kReplacement);
      return;
    }
    std::string scratch;
    if (!check_.push(static_cast<unsigned char>(v), scratch)) {
      invalid_ = true;
      out.insert(out.end(), run_.size() + 1, kReplacement);
      run_.clear();
      return;
    }
    run_ += static_cast<char>(v);
  }
  void finish(std::vector<std::string> &out) override {
    if (!run_.empty()) {
      if (check_.held() == 0)
        out.push_back(run_);
      else // a character cut short: not valid UTF-8
        out.insert(out.end(), run_.size(), kReplacement);
    }
    run_.clear();
    invalid_ = false;
    check_ = Utf8Lossy();
  }

private:
  std::string run_; // the bytes of a run valid so far
  Utf8Lossy check_;
  bool invalid_ = false;
};

/// The first decoder that joins the tokens into one: tokens in, text out.
class JoinStage {
public:
  explicit JoinStage(bool byteLevel) : byteLevel_(byteLevel) {}
  void push(const std::string &tok, std::string &out) {
    if (byteLevel_)
      byteLevelBytes(tok, lossy_, out);
    else
      out += tok;
  }
  void finish(std::string &out) { lossy_.finish(out); }

private:
  bool byteLevel_; // ByteLevel: the tokens' bytes, read as Rust's from_utf8_lossy; else Fuse
  Utf8Lossy lossy_;
};

} // namespace tokenizer_detail

using namespace tokenizer_detail;

struct TokenizerImpl {
  TokenizerLimits limits;
  std::string file; // tokenizer.json's path, for messages
  // The model.
  std::unordered_map<std::string, uint32_t> vocab;
  std::unordered_map<uint32_t, std::string> idToToken;
  // (a, b) -> (rank, merged). Ids are below 2^32, so a pair packs into a key exactly.
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges;
  bool byteFallback = false, fuseUnk = false, ignoreMerges = false;
  std::optional<uint32_t> unk;
  // Added tokens.
  struct Added {
    std::string content;
    uint32_t id;
    bool special, lstrip, rstrip, singleWord;
    bool normalized;     // matched in the normalized text, not the raw one
    std::string pattern; // what is matched: the content, normalized where `normalized` says
  };
  std::vector<Added> added;
  std::unordered_map<std::string, uint32_t> addedByContent;
  int64_t maxAdded = -1;                       // the largest added token id
  uint64_t addedBytes = 0;                     // of all added tokens' contents
  std::unordered_map<uint32_t, bool> addedIds; // id -> special
  // The matchers of the added tokens matched before and after normalization, and which added
  // token each of their patterns is.
  AddedMatcher rawMatcher, normalizedMatcher;
  std::vector<size_t> rawAdded, normalizedAdded;
  // The pipeline.
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> preTokenizers;
  bool hasDecoder = false; // without one, the tokenizers library joins the tokens with spaces
  std::vector<Decoder> decoders;
  std::vector<PostItem> post; // empty: ids as they are
  std::string bos, eos;
  int64_t idEnd = 0;

  static uint64_t pairKey(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

  std::string normalize(std::string s) const {
    for (const Normalizer &n : normalizers) {
      switch (n.kind) {
      case Normalizer::NFC: {
        UErrorCode status = U_ZERO_ERROR;
        const icu::Normalizer2 *nfc = icu::Normalizer2::getNFCInstance(status);
        if (U_FAILURE(status))
          break;
        // `s` is valid UTF-8 (encode() checked the text), as ICU needs.
        icu::UnicodeString u = nfc->normalize(icu::UnicodeString::fromUTF8(s), status);
        if (U_SUCCESS(status)) {
          s.clear();
          u.toUTF8String(s);
        }
        break;
      }
      case Normalizer::Replace:
        s = n.pattern.replaceAll(s, n.text);
        break;
      case Normalizer::Prepend:
        if (!s.empty())
          s = n.text + s;
        break;
      }
    }
    return s;
  }

  std::vector<Piece> split(const PreTokenizer &p, const Piece &piece, RegexBudget &budget) const {
    // Cut the piece into alternating unmatched and matched stretches.
    const std::string &s = piece.text;
    std::vector<std::pair<size_t, size_t>> hits =
        p.regex ? p.regex->findAll(s, limits, budget) : p.literal.findAll(s);
    struct Stretch {
      size_t b, e;
      bool match;
    };
    std::vector<Stretch> parts;
    size_t pos = 0;
    for (auto [b, e] : hits) {
      if (b > pos)
        parts.push_back({pos, b, false});
      parts.push_back({b, e, true});
      pos = e;
    }
    if (pos < s.size())
      parts.push_back({pos, s.size(), false});
    if (p.invert)
      for (Stretch &st : parts)
        st.match = !st.match;
    std::vector<Piece> out;
    bool pendingNext = false;
    for (const Stretch &st : parts) {
      Piece next{s.substr(st.b, st.e - st.b), piece.first && st.b == 0};
      if (st.match && p.behavior == "removed")
        continue;
      if (st.match && p.behavior == "merged_with_previous" && !out.empty()) {
        out.back().text += next.text;
        continue;
      }
      if (pendingNext) {
        out.back().text += next.text;
        pendingNext = false;
      } else {
        out.push_back(next);
      }
      if (st.match && p.behavior == "merged_with_next")
        pendingNext = true;
    }
    return out;
  }

  std::vector<Piece> preTokenize(std::vector<Piece> pieces, RegexBudget &budget) const {
    static const Regex gpt2(kGpt2Pattern, "GPT-2's pattern (the ByteLevel pre-tokenizer's)");
    for (const PreTokenizer &p : preTokenizers) {
      std::vector<Piece> next;
      for (Piece &piece : pieces) {
        switch (p.kind) {
        case PreTokenizer::Split:
          for (Piece &q : split(p, piece, budget))
            next.push_back(std::move(q));
          break;
        case PreTokenizer::ByteLevel: {
          if (p.addPrefixSpace && piece.text.rfind(' ', 0) != 0)
            piece.text = " " + piece.text;
          std::vector<Piece> parts{piece};
          if (p.useRegex) {
            parts.clear();
            for (auto [b, e] : gpt2.findAll(piece.text, limits, budget))
              parts.push_back({piece.text.substr(b, e - b), piece.first && b == 0});
          }
          for (Piece &q : parts) {
            std::string mapped;
            for (unsigned char c : q.text)
              mapped += byteLevel().byteToChar[c];
            next.push_back({mapped, q.first});
          }
          break;
        }
        case PreTokenizer::Metaspace: {
          std::string s = piece.text;
          replaceAll(s, " ", p.replacement);
          bool prepend = p.prependScheme == "always" || (p.prependScheme == "first" && piece.first);
          if (prepend && s.rfind(p.replacement, 0) != 0)
            s = p.replacement + s;
          if (!p.split) {
            next.push_back({s, piece.first});
            break;
          }
          PreTokenizer bySpace;
          bySpace.kind = PreTokenizer::Split;
          bySpace.literal = Literal(p.replacement);
          bySpace.behavior = "merged_with_next";
          for (Piece &q : split(bySpace, {s, piece.first}, budget))
            next.push_back(std::move(q));
          break;
        }
        }
      }
      pieces = std::move(next);
    }
    return pieces;
  }

  void bpe(const std::string &word, std::vector<int64_t> &out) const {
    if (word.empty())
      return;
    if (ignoreMerges) {
      auto it = vocab.find(word);
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<uint32_t> syms;
    bool lastUnk = false;
    for (const std::string &ch : utf8Chars(word)) {
      auto it = vocab.find(ch);
      if (it != vocab.end()) {
        syms.push_back(it->second);
        lastUnk = false;
        continue;
      }
      if (byteFallback) {
        std::vector<uint32_t> bytes;
        for (unsigned char c : ch) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", c);
          auto b = vocab.find(name);
          if (b == vocab.end())
            break;
          bytes.push_back(b->second);
        }
        if (bytes.size() == ch.size()) {
          syms.insert(syms.end(), bytes.begin(), bytes.end());
          lastUnk = false;
          continue;
        }
      }
      if (unk && !(fuseUnk && lastUnk))
        syms.push_back(*unk);
      lastUnk = unk.has_value();
    }
    // Merge the pair of lowest rank (leftmost among equals) until none is left, as the
    // `tokenizers` library does: a heap of candidate pairs over a linked list of symbols, so
    // a long piece (SentencePiece-style models do not split the text) costs n log n.
    size_t n = syms.size();
    std::vector<size_t> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = i - 1; // SIZE_MAX for the first
      next[i] = i + 1; // n for the last
    }
    using Candidate = std::tuple<uint32_t, size_t, uint32_t>; // rank, left position, result
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto consider = [&](size_t left) {
      if (left >= n || next[left] >= n)
        return;
      auto it = merges.find(pairKey(syms[left], syms[next[left]]));
      if (it != merges.end())
        heap.emplace(it->second.first, left, it->second.second);
    };
    for (size_t i = 0; i + 1 < n; ++i)
      consider(i);
    while (!heap.empty()) {
      auto [rank, left, merged] = heap.top();
      heap.pop();
      if (!alive[left] || next[left] >= n)
        continue;
      auto it = merges.find(pairKey(syms[left], syms[next[left]]));
      if (it == merges.end() || it->second.first != rank || it->second.second != merged)
        continue; // stale: one of the two has merged since
      size_t right = next[left];
      syms[left] = merged;
      alive[right] = false;
      next[left] = next[right];
      if (next[right] < n)
        prev[next[right]] = left;
      consider(prev[left]);
      consider(left);
    }
    for (size_t i = 0; i < n; ++i)
      if (alive[i])
        out.push_back(syms[i]);
  }

  /// Cuts `text` at the added tokens of `matcher`, as the tokenizers library's
  /// AddedVocabulary::find_matches does: the leftmost match, the longest there, then on after
  /// it (after the match, not after what rstrip took: a later match may start in that
  /// whitespace); a single_word token with a word character beside it is skipped (and the
  /// search goes on after it all the same); lstrip and rstrip take the whitespace around a
  /// match into it.
  /// `segment(begin, end)` gets the text between matches, `token(id)` each match.
  template <typename Segment, typename Token>
  void splitAdded(const std::string &text, const AddedMatcher &matcher,
                  const std::vector<size_t> &which, Segment segment, Token token) const {
    if (matcher.empty()) {
      segment(0, text.size());
      return;
    }
    std::vector<int32_t> longest;
    matcher.longestAt(text, longest);
    size_t startOffset = 0;
    // The last whitespace run rstrip measured, [wsFrom, wsEnd): a run of whitespace tokens
    // that rstrip is measured once, not once per token.
    size_t wsFrom = std::string::npos, wsEnd = 0;
    for (size_t pos = 0; pos < text.size();) {
      if (longest[pos] < 0) {
        ++pos;
        continue;
      }
      const Added &a = added[which[longest[pos]]];
      size_t start = pos, stop = pos + a.pattern.size();
      pos = stop;
      if (a.singleWord && (isWordChar(text, start, true) || isWordChar(text, stop, false)))
        continue;
      if (a.lstrip) {
        size_t b = start;
        for (size_t n; b > startOffset && (n = whitespaceBefore(text, b));)
          b -= n;
        start = std::max(b, startOffset);
      }
      if (a.rstrip) {
        if (wsFrom == std::string::npos || stop < wsFrom || stop > wsEnd) {
          wsFrom = wsEnd = stop;
          for (size_t n; (n = whitespaceAt(text, wsEnd));)
            wsEnd += n;
        }
        stop = wsEnd;
      }
      if (start > startOffset)
        segment(startOffset, start);
      // A match inside the whitespace an earlier rstrip took can be clamped to nothing by its
      // lstrip: the library drops such an empty split (and panics where it is inverted).
      if (start < stop)
        token(a.id);
      startOffset = stop;
    }
    if (startOffset < text.size())
      segment(startOffset, text.size());
  }

  /// Normalizes a stretch of text between added tokens, cuts it at the added tokens matched
  /// after normalization, pre-tokenizes and merges the rest.
  void encodeSegment(const std::string &text, bool first, RegexBudget &budget,
                     std::vector<int64_t> &out) const {
    if (text.empty())
      return;
    std::string norm = normalize(text);
    splitAdded(
        norm, normalizedMatcher, normalizedAdded,
        [&](size_t b, size_t e) {
          if (e > b)
            for (const Piece &p : preTokenize({{norm.substr(b, e - b), first && b == 0}}, budget))
              bpe(p.text, out);
        },
        [&](uint32_t id) { out.push_back(id); });
  }

  /// Whether the character before (or at) `pos` is a word character as Rust's regex `\w` says
  /// (alphabetic, a mark, a decimal digit, a connector, a joiner): single_word tokens need
  /// none on either side.
  static bool isWordChar(const std::string &s, size_t pos, bool before) {
    size_t b = pos;
    if (before) {
      if (pos == 0)
        return false;
      b = charBefore(s, pos);
    } else if (pos >= s.size()) {
      return false;
    }
    size_t n = before ? pos - b : charLen(s, pos);
    auto c = static_cast<UChar32>(codePointAt(s, b, n));
    return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) ||
           (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
           u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
  }

  std::vector<int64_t> encode(const std::string &text) const {
    size_t bad = firstInvalidUtf8(text);
    if (bad != std::string::npos) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[bad]));
      throw EncodeError("not valid UTF-8: byte " + std::string(byte) + " at offset " +
                        std::to_string(bad) + " begins no valid character");
    }
    // The regexes' work for the whole text, saturating rather than wrapping: so much a byte,
    // and beyond it what one match may be charged, its limits doubling up to regexMatchLimit
    // (less than twice that, then the limit itself).
    uint64_t perByte = limits.regexStepsPerByte, bytes = uint64_t(text.size()) + 1;
    uint64_t total = perByte != 0 && bytes > (std::numeric_limits<uint64_t>::max() / 4) / perByte
                         ? std::numeric_limits<uint64_t>::max() / 2
                         : perByte * bytes + 3 * uint64_t(limits.regexMatchLimit);
    RegexBudget budget{total, total, text.size()};
    std::vector<int64_t> out;
    splitAdded(
        text, rawMatcher, rawAdded,
        [&](size_t b, size_t e) { encodeSegment(text.substr(b, e - b), b == 0, budget, out); },
        [&](uint32_t id) { out.push_back(id); });
    return out;
  }

  /// The token string an id decodes from, or null for an id that names none or a special
  /// token skipped.
  const std::string *tokenOf(int64_t id, bool skipSpecial) const {
    if (id < 0 || id > std::numeric_limits<uint32_t>::max())
      return nullptr;
    auto a = addedIds.find(static_cast<uint32_t>(id));
    if (a != addedIds.end() && a->second && skipSpecial)
      return nullptr;
    auto it = idToToken.find(static_cast<uint32_t>(id));
    return it != idToToken.end() ? &it->second : nullptr;
  }

  // --- Loading --------------------------------------------------------------------------

  void checkCount(size_t have, const std::string &where, const char *what) const {
    if (have >= limits.maxComponents)
      throw LoadError(where + ": " + beyond(limits.maxComponents, what, "maxComponents"));
  }

  void loadNormalizer(const json &j, const std::string &where) {
    if (j.is_null())
      return;
    std::string kind = kindOf(j);
    if (kind == "Sequence") {
      if (!j.contains("normalizers") || !j["normalizers"].is_array())
        throw LoadError(where + ".normalizers: missing or not a list");
      for (size_t i = 0; i < j["normalizers"].size(); ++i)
        loadNormalizer(j["normalizers"][i], where + ".normalizers[" + std::to_string(i) + "]");
      return;
    }
    checkCount(normalizers.size(), where, "normalizers");
    if (kind == "NFC") {
      normalizers.push_back({Normalizer::NFC, Literal(), ""});
    } else if (kind == "Replace") {
      Literal literal;
      std::shared_ptr<Regex> regex;
      pattern(j.value("pattern", json()), where, limits, literal, regex);
      if (regex)
        throw LoadError(where + ": a Replace normalizer with a Regex pattern is not supported");
      normalizers.push_back({Normalizer::Replace, literal,
                             bounded(str(j, "content", where), where + ".content", limits)});
    } else if (kind == "Prepend") {
      normalizers.push_back({Normalizer::Prepend, Literal(),
                             bounded(str(j, "prepend", where), where + ".prepend", limits)});
    } else {
      throw LoadError(where + ": normalizer type '" + kind + "' is not supported");
    }
  }

  void loadPreTokenizer(const json &j, const std::string &where) {
    if (j.is_null())
      return;
    std::string kind = kindOf(j);
    PreTokenizer p;
    if (kind == "Sequence") {
      if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
        throw LoadError(where + ".pretokenizers: missing or not a list");
      for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
        loadPreTokenizer(j["pretokenizers"][i],
                         where + ".pretokenizers[" + std::to_string(i) + "]");
      return;
    }
    checkCount(preTokenizers.size(), where, "pre-tokenizers");
    if (kind == "Split") {
      p.kind = PreTokenizer::Split;
      pattern(j.value("pattern", json()), where, limits, p.literal, p.regex);
      p.behavior = str(j, "behavior", where);
      for (char &c : p.behavior)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (p.behavior == "mergedwithprevious")
        p.behavior = "merged_with_previous";
      if (p.behavior == "mergedwithnext")
        p.behavior = "merged_with_next";
      if (p.behavior != "isolated" && p.behavior != "removed" &&
          p.behavior != "merged_with_previous" && p.behavior != "merged_with_next")
        throw LoadError(where + ".behavior: " + shown(p.behavior) + " is not supported");
      p.invert = field(j, "invert", false, where);
    } else if (kind == "ByteLevel") {
      p.kind = PreTokenizer::ByteLevel;
      p.addPrefixSpace = field(j, "add_prefix_space", false, where);
      p.useRegex = field(j, "use_regex", true, where);
    } else if (kind == "Metaspace") {
      p.kind = PreTokenizer::Metaspace;
      p.replacement = oneChar(field(j, "replacement", std::string("\xE2\x96\x81"), where),
                              where + ".replacement");
      p.prependScheme = field(j, "prepend_scheme", std::string("always"), where);
      if (j.contains("add_prefix_space") && !j.contains("prepend_scheme"))
        p.prependScheme = field(j, "add_prefix_space", true, where) ? "always" : "never";
      p.split = field(j, "split", true, where);
      if (p.prependScheme != "first" && p.prependScheme != "always" && p.prependScheme != "never")
        throw LoadError(where + ".prepend_scheme: " + shown(p.prependScheme) + " is not supported");
    } else {
      throw LoadError(where + ": pre-tokenizer type '" + kind + "' is not supported");
    }
    preTokenizers.push_back(std::move(p));
  }

  void loadDecoder(const json &j, const std::string &where) {
    if (j.is_null())
      return;
    hasDecoder = true;
    std::string kind = kindOf(j);
    Decoder d;
    if (kind == "Sequence") {
      if (!j.contains("decoders") || !j["decoders"].is_array())
        throw LoadError(where + ".decoders: missing or not a list");
      for (size_t i = 0; i < j["decoders"].size(); ++i)
        loadDecoder(j["decoders"][i], where + ".decoders[" + std::to_string(i) + "]");
      return;
    }
    checkCount(decoders.size(), where, "decoders");
    if (kind == "Replace") {
      std::shared_ptr<Regex> regex;
      pattern(j.value("pattern", json()), where, limits, d.pattern, regex);
      if (regex)
        throw LoadError(where + ": a Replace decoder with a Regex pattern is not supported");
      d.kind = Decoder::Replace;
      d.content = bounded(str(j, "content", where), where + ".content", limits);
    } else if (kind == "ByteFallback") {
      d.kind = Decoder::ByteFallback;
    } else if (kind == "Fuse") {
      d.kind = Decoder::Fuse;
    } else if (kind == "Strip") {
      d.kind = Decoder::Strip;
      d.content = oneChar(str(j, "content", where), where + ".content");
      // Any count: stripping stops at the first other character, so a huge one costs nothing.
      d.start = field<uint64_t>(j, "start", 0, where);
      d.stop = field<uint64_t>(j, "stop", 0, where);
    } else if (kind == "Metaspace") {
      d.kind = Decoder::Metaspace;
      d.content = oneChar(field(j, "replacement", std::string("\xE2\x96\x81"), where),
                          where + ".replacement");
      std::string scheme = field(j, "prepend_scheme", std::string("always"), where);
      if (j.contains("add_prefix_space") && !j.contains("prepend_scheme"))
        scheme = field(j, "add_prefix_space", true, where) ? "always" : "never";
      d.prependNever = scheme == "never";
    } else if (kind == "ByteLevel") {
      d.kind = Decoder::ByteLevel;
    } else {
      throw LoadError(where + ": decoder type '" + kind + "' is not supported");
    }
    decoders.push_back(std::move(d));
  }

  uint32_t tokenId(const std::string &tok, const std::string &where) const {
    auto it = vocab.find(tok);
    if (it != vocab.end())
      return it->second;
    auto a = addedByContent.find(tok);
    if (a != addedByContent.end())
      return a->second;
    throw LoadError(where + ": token " + shown(tok) + " is not in the vocabulary");
  }

  void addPost(PostItem item, const std::string &where) {
    size_t ids = item.ids.size();
    for (const PostItem &p : post)
      ids += p.ids.size() + 1;
    if (ids >= limits.maxComponents)
      throw LoadError(where + ": " +
                      beyond(limits.maxComponents, "items and special ids", "maxComponents"));
    post.push_back(std::move(item));
  }

  void loadPostProcessor(const json &j, const std::string &where) {
    if (j.is_null())
      return;
    std::string kind = kindOf(j);
    if (kind == "Sequence") {
      if (!j.contains("processors") || !j["processors"].is_array())
        throw LoadError(where + ".processors: missing or not a list");
      for (size_t i = 0; i < j["processors"].size(); ++i)
        loadPostProcessor(j["processors"][i], where + ".processors[" + std::to_string(i) + "]");
    } else if (kind == "ByteLevel") {
      // Offsets only; the ids stay as they are.
    } else if (kind == "TemplateProcessing") {
      if (!j.contains("single") || !j["single"].is_array())
        throw LoadError(where + ".single: missing or not a list");
      const json &specials = j.value("special_tokens", json::object());
      post.clear();
      for (size_t i = 0; i < j["single"].size(); ++i) {
        const json &item = j["single"][i];
        std::string at = where + ".single[" + std::to_string(i) + "]";
        if (item.contains("Sequence")) {
          addPost({true, {}}, at);
        } else if (item.contains("SpecialToken")) {
          std::string name = str(item["SpecialToken"], "id", at + ".SpecialToken");
          std::vector<uint32_t> ids;
          if (specials.is_object() && specials.contains(name) && specials[name].is_object() &&
              specials[name].contains("ids") && specials[name]["ids"].is_array()) {
            const json &list = specials[name]["ids"];
            std::string idsAt = where + ".special_tokens[" + shown(name) + "].ids";
            if (list.size() >= limits.maxComponents)
              throw LoadError(idsAt + ": " + beyond(limits.maxComponents, "ids", "maxComponents"));
            for (size_t k = 0; k < list.size(); ++k)
              ids.push_back(idOf(list[k], idsAt + "[" + std::to_string(k) + "]"));
          } else {
            ids.push_back(tokenId(name, where + ".special_tokens"));
          }
          addPost({false, ids}, at);
        } else {
          throw LoadError(at + ": neither a Sequence nor a SpecialToken");
        }
      }
    } else if (kind == "BertProcessing" || kind == "RobertaProcessing") {
      auto tokenOf = [&](const char *key) {
        if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2)
          throw LoadError(where + "." + key + ": missing or not [token, id]");
        return idOf(j[key][1], where + "." + key + "[1]");
      };
      post.clear();
      addPost({false, {tokenOf("cls")}}, where);
      addPost({true, {}}, where);
      addPost({false, {tokenOf("sep")}}, where);
    } else {
      throw LoadError(where + ": post-processor type '" + kind + "' is not supported");
    }
  }

  /// The id the tokenizers library gives an added token (AddedVocabulary::add_tokens): its
  /// vocabulary entry's, else that of an added token with the same content, else the next
  /// after the vocabulary and the added tokens so far.
  uint64_t addedIdFor(const std::string &content) const {
    if (auto v = vocab.find(content); v != vocab.end())
      return v->second;
    if (auto a = addedByContent.find(content); a != addedByContent.end())
      return a->second;
    auto size = static_cast<int64_t>(vocab.size());
    return maxAdded >= 0 && (maxAdded >= size || size == 0) ? uint64_t(maxAdded) + 1
                                                            : uint64_t(size);
  }

  /// Adds an added token, or refuses it: too many, too long, or an id other than the one
  /// transformers gives it (`fileId`, when the file gives one).
  void addToken(Added tok, std::optional<uint32_t> fileId, const std::string &where) {
    bounded(tok.content, where + ".content", limits);
    if (added.size() >= limits.maxAddedTokens)
      throw LoadError(where + ": " +
                      beyond(limits.maxAddedTokens, "added tokens", "maxAddedTokens"));
    if (addedBytes + tok.content.size() > limits.maxAddedTokenBytes)
      throw LoadError(where + ": added tokens of " +
                      beyond(limits.maxAddedTokenBytes, "bytes in all", "maxAddedTokenBytes"));
    uint64_t want = addedIdFor(tok.content);
    if (want > std::numeric_limits<uint32_t>::max())
      throw LoadError(where + ": transformers would number " + shown(tok.content) + " " +
                      std::to_string(want) + ", not an integer in [0, 2^32)");
    auto owner = idToToken.find(static_cast<uint32_t>(want));
    if (fileId && *fileId != want) {
      auto other = idToToken.find(*fileId);
      std::string why = other != idToToken.end() && other->second != tok.content
                            ? "; id " + std::to_string(*fileId) + " is " + shown(other->second)
                            : "";
      throw LoadError(where + ": " + shown(tok.content) + " has id " + std::to_string(*fileId) +
                      ", but transformers gives it " + std::to_string(want) + why);
    }
    if (owner != idToToken.end() && owner->second != tok.content)
      throw LoadError(where + ": transformers would number " + shown(tok.content) + " " +
                      std::to_string(want) + ", which model.vocab gives " + shown(owner->second));
    if (addedByContent.count(tok.content))
      return; // listed again: the tokenizers library keeps the one it has
    tok.id = static_cast<uint32_t>(want);
    maxAdded = std::max<int64_t>(maxAdded, tok.id);
    addedBytes += tok.content.size();
    addedByContent[tok.content] = tok.id;
    addedIds[tok.id] = tok.special;
    idToToken[tok.id] = tok.content;
    added.push_back(std::move(tok));
  }

  /// Refuses components that can make text grow more than limits.maxTextGrowth: the
  /// worst case of each, composed, as n bytes -> f * n + c bytes.
  void checkGrowth() const {
    double g = static_cast<double>(limits.maxTextGrowth), f = 1, c = 0;
    for (const Normalizer &n : normalizers) {
      if (n.kind == Normalizer::NFC) { // NFC makes UTF-8 at most 3 times longer (UAX #15)
        f *= 3;
        c *= 3;
      } else if (n.kind == Normalizer::Replace) {
        double r = std::max(1.0, double(n.text.size()) / double(n.pattern.text.size()));
        f *= r;
        c *= r;
      } else {
        c += double(n.text.size());
      }
    }
    for (const PreTokenizer &p : preTokenizers) {
      // Per piece of n >= 1 bytes: the byte-level alphabet takes up to 2 bytes a byte (and
      // a prefix space one more); Metaspace a replacement for each space, and one before.
      double r = p.kind == PreTokenizer::ByteLevel   ? (p.addPrefixSpace ? 4 : 2)
                 : p.kind == PreTokenizer::Metaspace ? 2 * double(p.replacement.size())
                                                     : 1;
      f *= r;
      c *= r;
    }
    if (f > g || c > g) {
      char text[160];
      std::snprintf(text, sizeof text, "%.4g * n + %.4g bytes", f, c);
      throw LoadError(file + ": normalizer and pre_tokenizer: they can make an n-byte text " +
                      text + " long, " +
                      beyond(limits.maxTextGrowth, "times (n + 1)", "maxTextGrowth"));
    }
    double d = 1;
    for (const Decoder &dec : decoders) {
      if (dec.kind == Decoder::Replace)
        d *= std::max(1.0, double(dec.content.size()) / double(dec.pattern.text.size()));
      else if (dec.kind == Decoder::ByteLevel) // a 2-byte character to a byte, to U+FFFD
        d *= 2;
    }
    if (d > g) {
      char text[64];
      std::snprintf(text, sizeof text, "%.4g", d);
      throw LoadError(file + ": decoder: the decoders can make a token's text " + text +
                      " times longer, " + beyond(limits.maxTextGrowth, "times", "maxTextGrowth"));
    }
  }
};

/// A stream of decode: each decoder a stage (see "Decoding, as a stream" above).
struct DecodeStream {
  DecodeStream(const TokenizerImpl &tok, bool skipSpecial, bool incremental = false)
      : tok(tok), skipSpecial(skipSpecial), incremental(incremental) {
    build();
  }

  std::string push(int64_t id) {
    const std::string *t = tok.tokenOf(id, skipSpecial);
    if (!t)
      return "";
    return run({*t}, /*last=*/false);
  }

  std::string finish() {
    std::string out = run({}, /*last=*/true);
    build(); // what comes next is a new text
    return out;
  }

private:
  void build() {
    tokenStages.clear();
    join.reset();
    textStages.clear();
    any = false;
    for (const Decoder &d : tok.decoders) {
      std::unique_ptr<TextStage> text;
      switch (d.kind) {
      case Decoder::Replace:
        text = std::make_unique<ReplaceStage>(d);
        break;
      case Decoder::Strip:
        text = std::make_unique<StripStage>(d);
        break;
      case Decoder::Metaspace:
        text = std::make_unique<MetaspaceStage>(d);
        break;
      case Decoder::ByteFallback:
        if (join)
          text = std::make_unique<ByteFallbackTextStage>();
        else
          tokenStages.push_back(std::make_unique<ByteFallbackStage>());
        break;
      case Decoder::Fuse: // after the join, one token stays one
        if (!join)
          join = std::make_unique<JoinStage>(/*byteLevel=*/false);
        break;
      case Decoder::ByteLevel:
        if (join)
          text = std::make_unique<ByteLevelTextStage>(incremental);
        else
          join = std::make_unique<JoinStage>(/*byteLevel=*/true);
        break;
      }
      if (!text)
        continue;
      if (join) {
        text->reset(/*first=*/true); // the one text is the chain's token 0
        textStages.push_back(std::move(text));
      } else {
        tokenStages.push_back(std::make_unique<EachToken>(std::move(text)));
      }
    }
  }

  /// Takes `toks` through the stages; with `last`, each stage gives up what it holds too.
  std::string run(std::vector<std::string> toks, bool last) {
    for (auto &stage : tokenStages) {
      std::vector<std::string> next;
      for (std::string &t : toks)
        stage->push(std::move(t), next);
      if (last)
        stage->finish(next);
      toks = std::move(next);
    }
    std::string text;
    if (!join) {
      for (const std::string &t : toks) {
        if (!tok.hasDecoder && any)
          text += ' '; // no decoder: the tokenizers library joins the tokens with spaces
        any = true;
        text += t;
      }
      return text;
    }
    for (const std::string &t : toks)
      join->push(t, text);
    if (last)
      join->finish(text);
    for (auto &stage : textStages) {
      std::string next;
      stage->push(text, next);
      if (last)
        stage->finish(next);
      text = std::move(next);
    }
    return text;
  }

  const TokenizerImpl &tok;
  bool skipSpecial;
  bool incremental; // ByteLevel after the join: see Tokenizer::Stream
  std::vector<std::unique_ptr<TokenStage>> tokenStages; // before the join
  std::unique_ptr<JoinStage> join;                      // null: the tokens are the text
  std::vector<std::unique_ptr<TextStage>> textStages;   // after it
  bool any = false;                                     // a token has come out
};

namespace {

/// Refuses JSON nested deeper than `maxDepth` before nlohmann's parser and the loaders (which
/// recurse into Sequence components) see it: a scan of the brackets outside strings.
void checkJsonDepth(const std::string &text, const std::string &path, uint32_t maxDepth) {
  uint64_t depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        throw LoadError(path + ": nested " + beyond(maxDepth, "deep", "maxJsonDepth") +
                        " at byte " + std::to_string(i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

json readJson(const std::string &path, bool required, bool &found, const TokenizerLimits &limits) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > limits.maxFileBytes)
    throw LoadError(path + ": " + std::to_string(st.st_size) + " bytes, " +
                    beyond(limits.maxFileBytes, "bytes", "maxFileBytes"));
  std::string text;
  found = readFile(path, text);
  if (!found) {
    if (required)
      throw LoadError(path + ": cannot be opened");
    return json();
  }
  if (text.size() > limits.maxFileBytes) // it grew since
    throw LoadError(path + ": " + std::to_string(text.size()) + " bytes, " +
                    beyond(limits.maxFileBytes, "bytes", "maxFileBytes"));
  checkJsonDepth(text, path, limits.maxJsonDepth);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded())
    throw LoadError(path + ": not valid JSON");
  if (!j.is_object())
    throw LoadError(path + ": not a JSON object");
  return j;
}

/// A token field of tokenizer_config.json: a string or an AddedToken object ({"content": s}).
std::string configToken(const json &cfg, const char *key) {
  if (!cfg.contains(key))
    return "";
  const json &v = cfg[key];
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

} // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<TokenizerImpl>()) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string &dir, std::string &error,
                                           const TokenizerLimits &limits) {
  TokenizerSource source;
  source.file = dir + "/tokenizer.json";
  source.configFile = dir + "/tokenizer_config.json";
  source.vocab = source.file + ": model.vocab";
  source.merges = source.file + ": model.merges";
  source.addedTokens = source.file + ": added_tokens";
  json j, cfg;
  try {
    bool found = false;
    j = readJson(source.file, true, found, limits);
    cfg = readJson(source.configFile, false, found, limits);
    if (!found)
      cfg = json::object();
  } catch (const LoadError &e) {
    error = e.what();
    return nullptr;
  } catch (const std::bad_alloc &) {
    error = source.file + ": not enough memory to load it";
    return nullptr;
  }
  return TokenizerBuilder::build(j, cfg, source, limits, error);
}

std::unique_ptr<Tokenizer> TokenizerBuilder::build(const json &j, const json &cfgIn,
                                                   const TokenizerSource &source,
                                                   const TokenizerLimits &limits,
                                                   std::string &error) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  TokenizerImpl &t = *tok->impl_;
  t.limits = limits;
  const std::string &file = source.file;
  const std::string &cfgFile = source.configFile;
  t.file = file;
  try {
    if (!j.is_object())
      throw LoadError(file + ": not a JSON object");
    const json &cfg = cfgIn.is_object() ? cfgIn : json::object();
    if (!j.contains("model") || !j["model"].is_object())
      throw LoadError(file + ": model: missing or not an object");
    const json &model = j["model"];
    std::string kind = model.contains("type") ? kindOf(model) : "BPE";
    if (kind != "BPE")
      throw LoadError(file + ": model.type: a " + kind +
                      " model is not supported (tpc reads BPE tokenizers only)");
    if (!model.contains("vocab") || !model["vocab"].is_object())
      throw LoadError(source.vocab + ": missing or not an object");
    if (model["vocab"].size() > limits.maxVocab)
      throw LoadError(source.vocab + ": " + beyond(limits.maxVocab, "entries", "maxVocab"));
    t.vocab.reserve(model["vocab"].size());
    t.idToToken.reserve(model["vocab"].size());
    for (auto &[tokStr, idJ] : model["vocab"].items()) {
      std::string where = source.vocab + "[" + shown(tokStr) + "]";
      bounded(tokStr, where, limits);
      uint32_t id = idOf(idJ, where);
      auto [it, fresh] = t.idToToken.emplace(id, tokStr);
      if (!fresh)
        throw LoadError(where + ": id " + std::to_string(id) + " is " + shown(it->second) +
                        "'s too");
      t.vocab.emplace(tokStr, id);
      t.idEnd = std::max<int64_t>(t.idEnd, int64_t(id) + 1);
    }
    if (!model.contains("merges") || !model["merges"].is_array())
      throw LoadError(source.merges + ": missing or not a list");
    if (model["merges"].size() > limits.maxMerges)
      throw LoadError(source.merges + ": " + beyond(limits.maxMerges, "entries", "maxMerges"));
    t.merges.reserve(model["merges"].size());
    uint32_t rank = 0;
    for (const json &m : model["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        std::string s = m.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos)
          throw LoadError(source.merges + "[" + std::to_string(rank) + "]: not 'a b'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        throw LoadError(source.merges + "[" + std::to_string(rank) + "]: not a pair");
      }
      auto ia = t.vocab.find(a), ib = t.vocab.find(b), im = t.vocab.find(a + b);
      if (ia == t.vocab.end() || ib == t.vocab.end() || im == t.vocab.end())
        throw LoadError(source.merges + "[" + std::to_string(rank) + "]: " +
                        shown(a + " " + b) + " has a part or a result not in the vocabulary");
      // A pair listed twice takes its later rank, as the tokenizers library's map does.
      t.merges[TokenizerImpl::pairKey(ia->second, ib->second)] = {rank, im->second};
      ++rank;
    }
    t.byteFallback = field(model, "byte_fallback", false, file + ": model");
    t.fuseUnk = field(model, "fuse_unk", false, file + ": model");
    t.ignoreMerges = field(model, "ignore_merges", false, file + ": model");
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto it = t.vocab.find(model["unk_token"].get<std::string>());
      if (it != t.vocab.end())
        t.unk = it->second;
    }

    // Added tokens, with the ids the tokenizers library gives them: it ignores the file's id,
    // so one that differs is refused rather than followed or silently renumbered.
    if (j.contains("added_tokens")) {
      if (!j["added_tokens"].is_array())
        throw LoadError(source.addedTokens + ": not a list");
      for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
        const json &a = j["added_tokens"][i];
        std::string where = source.addedTokens + "[" + std::to_string(i) + "]";
        if (!a.is_object() || !a.contains("id"))
          throw LoadError(where + ".id: missing");
        uint32_t id = idOf(a["id"], where + ".id");
        TokenizerImpl::Added tokA{str(a, "content", where),
                                  id,
                                  field(a, "special", false, where),
                                  field(a, "lstrip", false, where),
                                  field(a, "rstrip", false, where),
                                  field(a, "single_word", false, where),
                                  field(a, "normalized", !field(a, "special", false, where), where),
                                  ""};
        if (tokA.content.empty())
          continue; // the tokenizers library ignores it
        t.addToken(std::move(tokA), id, where);
      }
    }

    // The tokenizer class (without "Fast", an alias in transformers 5).
    std::string cls = cfg.contains("tokenizer_class") && cfg["tokenizer_class"].is_string()
                          ? cfg["tokenizer_class"].get<std::string>()
                          : std::string();
    if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0)
      cls.resize(cls.size() - 4);

    // The named special tokens: the config's, else the class's defaults (its __init__'s).
    // transformers adds those the vocabulary lacks as new special tokens.
    std::map<std::string, std::string> defaults;
    if (cls == "LlamaTokenizer")
      defaults = {{"unk_token", "<unk>"}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
    else if (cls == "GemmaTokenizer")
      defaults = {{"unk_token", "<unk>"},
                  {"bos_token", "<bos>"},
                  {"eos_token", "<eos>"},
                  {"pad_token", "<pad>"},
                  {"mask_token", "<mask>"}};
    else if (cls == "Qwen2Tokenizer")
      defaults = {{"unk_token", "<|endoftext|>"},
                  {"eos_token", "<|endoftext|>"},
                  {"pad_token", "<|endoftext|>"}};
    else if (cls == "GPT2Tokenizer")
      defaults = {{"unk_token", "<|endoftext|>"},
                  {"bos_token", "<|endoftext|>"},
                  {"eos_token", "<|endoftext|>"}};
    auto named = [&](const std::string &key) {
      if (cfg.contains(key))
        return configToken(cfg, key.c_str());
      auto d = defaults.find(key);
      return d != defaults.end() ? d->second : std::string();
    };
    for (const char *key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                            "cls_token", "mask_token"}) {
      std::string s = named(key);
      if (s.empty() || t.addedByContent.count(s))
        continue;
      t.addToken({s, 0, true, false, false, false, false, ""}, std::nullopt, cfgFile + ": " + key);
    }
    t.bos = named("bos_token");
    t.eos = named("eos_token");

    // The pipeline: the tokenizer class's own where transformers rebuilds it, else the file's.
    const std::string space = "\xE2\x96\x81";
    if (cls == "LlamaTokenizer") {
      bool addPrefixSpace = cfg.contains("add_prefix_space") && cfg["add_prefix_space"].is_boolean()
                                ? cfg["add_prefix_space"].get<bool>()
                                : true;
      bool legacy =
          cfg.contains("legacy") && cfg["legacy"].is_boolean() && cfg["legacy"].get<bool>();
      t.byteFallback = true;
      t.fuseUnk = true;
      t.ignoreMerges = false;
      t.unk.reset();
      PreTokenizer p;
      p.kind = PreTokenizer::Metaspace;
      p.prependScheme = addPrefixSpace ? (legacy ? "always" : "first") : "never";
      p.split = false;
      t.preTokenizers = {p};
      t.hasDecoder = true;
      t.decoders = {{Decoder::Replace, Literal(space), " "},
                    {Decoder::ByteFallback, Literal(), ""},
                    {Decoder::Fuse, Literal(), ""}};
      if (addPrefixSpace) {
        Decoder strip{Decoder::Strip, Literal(), " "};
        strip.start = 1;
        t.decoders.push_back(strip);
      }
    } else if (cls == "GemmaTokenizer") {
      t.byteFallback = true;
      t.fuseUnk = true;
      t.ignoreMerges = false;
      std::string unkTok = cfg.contains("unk_token") ? configToken(cfg, "unk_token") : "<unk>";
      auto u = t.vocab.find(unkTok);
      t.unk = u != t.vocab.end() ? std::optional<uint32_t>(u->second) : std::nullopt;
      t.normalizers = {{Normalizer::Replace, Literal(" "), space}};
      PreTokenizer p;
      p.kind = PreTokenizer::Split;
      p.literal = Literal(" ");
      p.behavior = "merged_with_previous";
      t.preTokenizers = {p};
      t.hasDecoder = true;
      t.decoders = {{Decoder::Replace, Literal(space), " "},
                    {Decoder::ByteFallback, Literal(), ""},
                    {Decoder::Fuse, Literal(), ""}};
    } else if (cls == "Qwen2Tokenizer" || cls == "GPT2Tokenizer") {
      t.byteFallback = false;
      t.fuseUnk = false;
      t.ignoreMerges = false;
      t.unk.reset();
      bool addPrefixSpace = cfg.contains("add_prefix_space") &&
                            cfg["add_prefix_space"].is_boolean() &&
                            cfg["add_prefix_space"].get<bool>();
      PreTokenizer bl;
      bl.kind = PreTokenizer::ByteLevel;
      bl.addPrefixSpace = addPrefixSpace;
      t.normalizers.clear();
      t.preTokenizers.clear();
      if (cls == "Qwen2Tokenizer") {
        t.normalizers = {{Normalizer::NFC, Literal(), ""}};
        PreTokenizer split;
        split.kind = PreTokenizer::Split;
        split.regex = std::make_shared<Regex>(kQwen2Pattern, "Qwen2Tokenizer's pattern");
        split.behavior = "isolated";
        t.preTokenizers.push_back(split);
        bl.useRegex = false;
      }
      t.preTokenizers.push_back(bl);
      t.hasDecoder = true;
      t.decoders = {{Decoder::ByteLevel, Literal(), ""}};
    } else {
      t.loadNormalizer(j.value("normalizer", json()), file + ": normalizer");
      t.loadPreTokenizer(j.value("pre_tokenizer", json()), file + ": pre_tokenizer");
      t.loadDecoder(j.value("decoder", json()), file + ": decoder");
    }
    t.checkGrowth();

    // Added tokens matched after normalization are matched in their normalized form, as the
    // tokenizers library does.
    // Decoding gives such a token in that form too (the decoders then turn "\u2581is\u2581a"
    // back into " is a", where the content "is a" would lose its space).
    // The matchers list special tokens first, as the library does: among tokens that match
    // the same text, the first wins.
    std::vector<std::string> raw, normalized;
    for (bool special : {true, false}) {
      for (size_t i = 0; i < t.added.size(); ++i) {
        TokenizerImpl::Added &a = t.added[i];
        if (a.special != special)
          continue;
        a.pattern = a.normalized ? t.normalize(a.content) : a.content;
        t.idToToken[a.id] = a.pattern;
        (a.normalized ? normalized : raw).push_back(a.pattern);
        (a.normalized ? t.normalizedAdded : t.rawAdded).push_back(i);
        t.idEnd = std::max<int64_t>(t.idEnd, int64_t(a.id) + 1);
      }
    }
    t.rawMatcher.build(raw);
    t.normalizedMatcher.build(normalized);

    // The post-processor: the file's. transformers ignores add_bos_token and add_eos_token of
    // tokenizer_config.json when there is a tokenizer.json, and with no post-processor in it
    // builds one that adds neither.
    t.loadPostProcessor(j.value("post_processor", json()), file + ": post_processor");
    for (const PostItem &item : t.post)
      for (uint32_t id : item.ids)
        t.idEnd = std::max<int64_t>(t.idEnd, int64_t(id) + 1);
  } catch (const LoadError &e) {
    error = e.what();
    return nullptr;
  } catch (const json::exception &e) {
    error = file + ": " + e.what();
    return nullptr;
  } catch (const std::bad_alloc &) {
    error = file + ": not enough memory to load it";
    return nullptr;
  }
  return tok;
}

std::optional<std::vector<int64_t>> Tokenizer::encode(const std::string &text, bool addSpecial,
                                                      std::string &error) const {
  std::vector<int64_t> ids;
  try {
    ids = impl_->encode(text);
  } catch (const EncodeError &e) {
    error = e.what();
    return std::nullopt;
  } catch (const std::bad_alloc &) {
    error = "not enough memory to encode " + std::to_string(text.size()) + " bytes";
    return std::nullopt;
  }
  if (!addSpecial || impl_->post.empty())
    return ids;
  std::vector<int64_t> out;
  for (const PostItem &item : impl_->post) {
    if (item.isSequence)
      out.insert(out.end(), ids.begin(), ids.end());
    else
      out.insert(out.end(), item.ids.begin(), item.ids.end());
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t> &ids, bool skipSpecial) const {
  DecodeStream stream(*impl_, skipSpecial);
  std::string out;
  for (int64_t id : ids)
    out += stream.push(id);
  out += stream.finish();
  return out;
}

Tokenizer::Stream Tokenizer::stream(bool skipSpecial, bool incremental) const {
  return Stream(std::make_unique<DecodeStream>(*impl_, skipSpecial, incremental));
}

Tokenizer::Stream::Stream(std::unique_ptr<DecodeStream> state) : state_(std::move(state)) {}
Tokenizer::Stream::Stream(Stream &&) noexcept = default;
Tokenizer::Stream &Tokenizer::Stream::operator=(Stream &&) noexcept = default;
Tokenizer::Stream::~Stream() = default;
std::string Tokenizer::Stream::push(int64_t id) { return state_->push(id); }
std::string Tokenizer::Stream::finish() { return state_->finish(); }

std::optional<int64_t> Tokenizer::id(const std::string &token) const {
  auto a = impl_->addedByContent.find(token);
  if (a != impl_->addedByContent.end())
    return a->second;
  auto it = impl_->vocab.find(token);
  if (it != impl_->vocab.end())
    return it->second;
  return std::nullopt;
}

int64_t Tokenizer::idEnd() const { return impl_->idEnd; }
const std::string &Tokenizer::bosToken() const { return impl_->bos; }
const std::string &Tokenizer::eosToken() const { return impl_->eos; }

} // namespace tpcrt
