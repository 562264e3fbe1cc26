// The BPE tokenizers of tpcrt/tokenizer.h. A pipeline as the `tokenizers` library runs it:
// added tokens are cut out of the text first (longest first), each remaining segment is
// normalized, pre-tokenized into pieces and each piece merged by BPE; the post-processor adds
// BOS/EOS. Decoding maps ids to token strings and runs the decoder chain over them.
#include "tpcrt/tokenizer.h"

#include "tpcrt/file.h"

#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
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

/// Splits a UTF-8 string into its characters (stray bytes one each).
std::vector<std::string> utf8Chars(const std::string &s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = std::min(utf8Len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
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

/// Bytes to text as Rust's String::from_utf8_lossy does it: each maximal invalid
/// subsequence becomes one U+FFFD.
std::string utf8Lossy(const std::string &s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
      n = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0)
        lo = 0xA0;
      if (c == 0xED)
        hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0)
        lo = 0x90;
      if (c == 0xF4)
        hi = 0x8F;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t k = 1;
    for (; k < n && i + k < s.size(); ++k) {
      unsigned char d = s[i + k];
      if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF))
        break;
    }
    if (k == n) {
      out.append(s, i, n);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += k;
  }
  return out;
}

bool validUtf8(const std::string &s) { return utf8Lossy(s) == s; }

/// Whether a code point is whitespace as Rust's char::is_whitespace says (added tokens'
/// lstrip and rstrip take it).
bool isWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

uint32_t decodeCodePoint(const std::string &ch);

/// The length of the whitespace character that ends at `end` (0 if none).
size_t whitespaceBefore(const std::string &s, size_t end) {
  if (end == 0)
    return 0;
  size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80)
    --b;
  return isWhitespace(decodeCodePoint(s.substr(b, end - b))) ? end - b : 0;
}

/// The length of the whitespace character that starts at `pos` (0 if none).
size_t whitespaceAt(const std::string &s, size_t pos) {
  if (pos >= s.size())
    return 0;
  size_t n = std::min(utf8Len(static_cast<unsigned char>(s[pos])), s.size() - pos);
  return isWhitespace(decodeCodePoint(s.substr(pos, n))) ? n : 0;
}

void replaceAll(std::string &s, const std::string &from, const std::string &to) {
  if (from.empty())
    return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// --- GPT-2's byte-level alphabet ------------------------------------------------------------

/// Each byte's printable stand-in: bytes that are printable Latin-1 stand for themselves, the
/// others for 256 + their order.
struct ByteLevelTable {
  std::string byteToChar[256];
  std::unordered_map<uint32_t, unsigned char> charToByte;
  ByteLevelTable() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      uint32_t cp = self ? b : 256 + next++;
      appendUtf8(byteToChar[b], cp);
      charToByte[cp] = static_cast<unsigned char>(b);
    }
  }
};
const ByteLevelTable &byteLevel() {
  static const ByteLevelTable table;
  return table;
}

uint32_t decodeCodePoint(const std::string &ch) {
  auto c = static_cast<unsigned char>(ch[0]);
  size_t n = ch.size();
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t i = 1; i < n; ++i)
    cp = (cp << 6) | (static_cast<unsigned char>(ch[i]) & 0x3F);
  return cp;
}

// GPT-2's pre-tokenization pattern, the ByteLevel pre-tokenizer's default.
const char *const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2Tokenizer's (transformers' PRETOKENIZE_REGEX in tokenization_qwen2.py).
const char *const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// --- Regex (PCRE2, UTF and Unicode properties) -------------------------------------------

class Regex {
public:
  Regex(const std::string &pattern, const std::string &where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw LoadError(where + ": regex " + json(pattern).dump() + " does not compile at offset " +
                      std::to_string(off) + ": " + reinterpret_cast<char *>(msg));
    }
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Regex() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;

  /// Every non-overlapping match in s, as [begin, end) byte ranges.
  std::vector<std::pair<size_t, size_t>> findAll(const std::string &s) const {
    std::vector<std::pair<size_t, size_t>> out;
    size_t pos = 0;
    while (pos <= s.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                           PCRE2_NO_UTF_CHECK, data_, nullptr);
      if (rc < 0)
        break;
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(data_);
      size_t b = ov[0], e = ov[1];
      if (e == b) { // an empty match: step over one character
        pos = b + (b < s.size() ? utf8Len(static_cast<unsigned char>(s[b])) : 1);
        continue;
      }
      out.emplace_back(b, e);
      pos = e;
    }
    return out;
  }

private:
  pcre2_code *code_ = nullptr;
  pcre2_match_data *data_ = nullptr;
};

// --- Components -------------------------------------------------------------------------

struct Normalizer {
  enum Kind { NFC, Replace, Prepend } kind;
  std::string a, b; // Replace: pattern, content; Prepend: a
};

struct Piece {
  std::string text;
  bool first; // at offset 0 of the original text (Metaspace's prepend_scheme "first")
};

struct PreTokenizer {
  enum Kind { Split, ByteLevel, Metaspace } kind;
  // Split
  std::shared_ptr<Regex> regex; // null: split on `literal`
  std::string literal;
  std::string behavior; // isolated, removed, merged_with_previous, merged_with_next
  bool invert = false;
  // ByteLevel
  bool addPrefixSpace = false, useRegex = true;
  // Metaspace
  std::string replacement = "\xE2\x96\x81";
  std::string prependScheme = "always";
  bool split = true;
};

struct Decoder {
  enum Kind { Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel } kind;
  std::string a, b; // Replace: pattern, content; Strip: content; Metaspace: replacement
  size_t start = 0, stop = 0;
  std::string prependScheme = "always";
};

struct PostItem {
  bool isSequence; // $A, else special token ids
  std::vector<int64_t> ids;
};

std::string kindOf(const json &j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string();
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

/// A Replace/Split pattern: {"String": s} or {"Regex": r}.
void pattern(const json &j, const std::string &where, std::string &literal,
             std::shared_ptr<Regex> &regex) {
  if (!j.is_object())
    throw LoadError(where + ".pattern: missing or not an object");
  if (j.contains("String") && j["String"].is_string())
    literal = j["String"].get<std::string>();
  else if (j.contains("Regex") && j["Regex"].is_string())
    regex = std::make_shared<Regex>(j["Regex"].get<std::string>(), where + ".pattern");
  else
    throw LoadError(where + ".pattern: neither a String nor a Regex");
}

} // namespace tokenizer_detail

using namespace tokenizer_detail;

struct TokenizerImpl {
  std::string file; // tokenizer.json's path, for messages
  // The model.
  std::unordered_map<std::string, int64_t> vocab;
  std::unordered_map<int64_t, std::string> idToToken;
  std::unordered_map<uint64_t, std::pair<uint32_t, int64_t>> merges; // (a, b) -> (rank, merged)
  bool byteFallback = false, fuseUnk = false, ignoreMerges = false;
  std::optional<int64_t> unk;
  // Added tokens.
  struct Added {
    std::string content;
    int64_t id;
    bool special, lstrip, rstrip, singleWord;
    bool normalized;     // matched in the normalized text, not the raw one
    std::string pattern; // what is matched: the content, normalized where `normalized` says
  };
  std::vector<Added> added;                   // longest first
  std::unordered_map<int64_t, bool> addedIds; // id -> special
  // The pipeline.
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> preTokenizers;
  std::vector<Decoder> decoders;
  std::vector<PostItem> post; // empty: ids as they are
  std::string bos, eos;

  static uint64_t pairKey(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  }

  std::string normalize(std::string s) const {
    for (const Normalizer &n : normalizers) {
      switch (n.kind) {
      case Normalizer::NFC: {
        UErrorCode status = U_ZERO_ERROR;
        const icu::Normalizer2 *nfc = icu::Normalizer2::getNFCInstance(status);
        if (U_FAILURE(status))
          break;
        icu::UnicodeString u = nfc->normalize(icu::UnicodeString::fromUTF8(s), status);
        if (U_SUCCESS(status)) {
          s.clear();
          u.toUTF8String(s);
        }
        break;
      }
      case Normalizer::Replace:
        replaceAll(s, n.a, n.b);
        break;
      case Normalizer::Prepend:
        if (!s.empty())
          s = n.a + s;
        break;
      }
    }
    return s;
  }

  static std::vector<Piece> split(const PreTokenizer &p, const Piece &piece) {
    // Cut the piece into alternating unmatched and matched stretches.
    std::vector<std::pair<size_t, size_t>> hits;
    const std::string &s = piece.text;
    if (p.regex) {
      hits = p.regex->findAll(s);
    } else if (!p.literal.empty()) {
      for (size_t pos = 0, h; (h = s.find(p.literal, pos)) != std::string::npos;
           pos = h + p.literal.size())
        hits.emplace_back(h, h + p.literal.size());
    }
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

  std::vector<Piece> preTokenize(std::vector<Piece> pieces) const {
    static const Regex gpt2(kGpt2Pattern, "GPT-2's pattern");
    for (const PreTokenizer &p : preTokenizers) {
      std::vector<Piece> next;
      for (Piece &piece : pieces) {
        switch (p.kind) {
        case PreTokenizer::Split:
          for (Piece &q : split(p, piece))
            next.push_back(std::move(q));
          break;
        case PreTokenizer::ByteLevel: {
          if (p.addPrefixSpace && piece.text.rfind(' ', 0) != 0)
            piece.text = " " + piece.text;
          std::vector<Piece> parts{piece};
          if (p.useRegex) {
            parts.clear();
            for (auto [b, e] : gpt2.findAll(piece.text))
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
          bySpace.literal = p.replacement;
          bySpace.behavior = "merged_with_next";
          for (Piece &q : split(bySpace, {s, piece.first}))
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
    std::vector<int64_t> syms;
    bool lastUnk = false;
    for (const std::string &ch : utf8Chars(word)) {
      auto it = vocab.find(ch);
      if (it != vocab.end()) {
        syms.push_back(it->second);
        lastUnk = false;
        continue;
      }
      if (byteFallback) {
        std::vector<int64_t> bytes;
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
    using Candidate = std::tuple<uint32_t, size_t, int64_t>; // rank, left position, result
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
    std::vector<int64_t> kept;
    for (size_t i = 0; i < n; ++i)
      if (alive[i])
        kept.push_back(syms[i]);
    syms = std::move(kept);
    out.insert(out.end(), syms.begin(), syms.end());
  }

  /// Cuts `text` at the added tokens whose `normalized` flag is `normalizedPass` (the others
  /// were matched before normalization, or will be after it), leftmost first and the longest
  /// there; `segment(begin, end)` gets the text between them, `token(id)` each match.
  template <typename Segment, typename Token>
  void splitAdded(const std::string &text, bool normalizedPass, Segment segment,
                  Token token) const {
    size_t segStart = 0, pos = 0;
    while (pos < text.size()) {
      const Added *hit = nullptr;
      for (const Added &a : added) {
        if (a.normalized != normalizedPass || a.pattern.empty() ||
            text.compare(pos, a.pattern.size(), a.pattern) != 0)
          continue;
        if (a.singleWord &&
            (isWordChar(text, pos, true) || isWordChar(text, pos + a.pattern.size(), false)))
          continue;
        hit = &a;
        break;
      }
      if (!hit) {
        pos += utf8Len(static_cast<unsigned char>(text[pos]));
        continue;
      }
      size_t b = pos, e = pos + hit->pattern.size();
      if (hit->lstrip)
        for (size_t n; b > segStart && (n = whitespaceBefore(text, b)) && b - n >= segStart;)
          b -= n;
      if (hit->rstrip)
        for (size_t n; (n = whitespaceAt(text, e));)
          e += n;
      segment(segStart, b);
      token(hit->id);
      segStart = pos = e;
    }
    segment(segStart, text.size());
  }

  /// Normalizes a stretch of text between added tokens, cuts it at the added tokens matched
  /// after normalization, pre-tokenizes and merges the rest.
  void encodeSegment(const std::string &text, bool first, std::vector<int64_t> &out) const {
    if (text.empty())
      return;
    std::string norm = normalize(text);
    splitAdded(
        norm, /*normalizedPass=*/true,
        [&](size_t b, size_t e) {
          if (e > b)
            for (const Piece &p : preTokenize({{norm.substr(b, e - b), first && b == 0}}))
              bpe(p.text, out);
        },
        [&](int64_t id) { out.push_back(id); });
  }

  /// Whether the character before (or at) `pos` is a word character as Rust's regex `\w` says
  /// (alphabetic, a mark, a decimal digit, a connector, a joiner): single_word tokens need
  /// none on either side.
  static bool isWordChar(const std::string &s, size_t pos, bool before) {
    size_t b = pos, n = 0;
    if (before) {
      if (pos == 0)
        return false;
      b = pos - 1;
      while (b > 0 && pos - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80)
        --b;
      n = pos - b;
    } else {
      if (pos >= s.size())
        return false;
      n = std::min(utf8Len(static_cast<unsigned char>(s[pos])), s.size() - pos);
    }
    auto c = static_cast<UChar32>(decodeCodePoint(s.substr(b, n)));
    return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) ||
           (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
           u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
  }

  std::vector<int64_t> encode(const std::string &text) const {
    std::vector<int64_t> out;
    splitAdded(
        text, /*normalizedPass=*/false,
        [&](size_t b, size_t e) { encodeSegment(text.substr(b, e - b), b == 0, out); },
        [&](int64_t id) { out.push_back(id); });
    return out;
  }

  std::vector<std::string> runDecoders(std::vector<std::string> toks) const {
    for (const Decoder &d : decoders) {
      switch (d.kind) {
      case Decoder::Replace:
        for (std::string &t : toks)
          replaceAll(t, d.a, d.b);
        break;
      case Decoder::ByteFallback: {
        std::vector<std::string> next;
        std::string bytes;
        size_t count = 0;
        auto flush = [&] {
          if (count == 0)
            return;
          if (validUtf8(bytes))
            next.push_back(bytes);
          else
            for (size_t i = 0; i < count; ++i)
              next.push_back("\xEF\xBF\xBD");
          bytes.clear();
          count = 0;
        };
        for (std::string &t : toks) {
          unsigned v = 0;
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
              std::isxdigit(static_cast<unsigned char>(t[3])) &&
              std::isxdigit(static_cast<unsigned char>(t[4]))) {
            v = std::stoul(t.substr(3, 2), nullptr, 16);
            bytes += static_cast<char>(v);
            ++count;
            continue;
          }
          flush();
          next.push_back(std::move(t));
        }
        flush();
        toks = std::move(next);
        break;
      }
      case Decoder::Fuse: {
        std::string all;
        for (const std::string &t : toks)
          all += t;
        toks = {all};
        break;
      }
      case Decoder::Strip:
        for (std::string &t : toks) {
          size_t b = 0, e = t.size();
          for (size_t i = 0; i < d.start && t.compare(b, d.a.size(), d.a) == 0; ++i)
            b += d.a.size();
          for (size_t i = 0;
               i < d.stop && e >= b + d.a.size() && t.compare(e - d.a.size(), d.a.size(), d.a) == 0;
               ++i)
            e -= d.a.size();
          t = t.substr(b, e - b);
        }
        break;
      case Decoder::Metaspace:
        for (size_t i = 0; i < toks.size(); ++i) {
          replaceAll(toks[i], d.a, " ");
          if (i == 0 && d.prependScheme != "never" && !toks[i].empty() && toks[i][0] == ' ')
            toks[i].erase(0, 1);
        }
        break;
      case Decoder::ByteLevel: {
        std::string bytes;
        for (const std::string &t : toks)
          for (const std::string &ch : utf8Chars(t)) {
            auto it = byteLevel().charToByte.find(decodeCodePoint(ch));
            if (it != byteLevel().charToByte.end())
              bytes += static_cast<char>(it->second);
            else
              bytes += ch;
          }
        toks = {utf8Lossy(bytes)};
        break;
      }
      }
    }
    return toks;
  }

  std::string decode(const std::vector<int64_t> &ids, bool skipSpecial) const {
    std::vector<std::string> toks;
    for (int64_t id : ids) {
      auto a = addedIds.find(id);
      if (a != addedIds.end() && a->second && skipSpecial)
        continue;
      auto it = idToToken.find(id);
      if (it != idToToken.end())
        toks.push_back(it->second);
    }
    std::string out;
    for (const std::string &t : runDecoders(std::move(toks)))
      out += t;
    return out;
  }

  // --- Loading --------------------------------------------------------------------------

  void loadNormalizer(const json &j, const std::string &where) {
    if (j.is_null())
      return;
    std::string kind = kindOf(j);
    if (kind == "Sequence") {
      if (!j.contains("normalizers") || !j["normalizers"].is_array())
        throw LoadError(where + ".normalizers: missing or not a list");
      for (size_t i = 0; i < j["normalizers"].size(); ++i)
        loadNormalizer(j["normalizers"][i], where + ".normalizers[" + std::to_string(i) + "]");
    } else if (kind == "NFC") {
      normalizers.push_back({Normalizer::NFC, "", ""});
    } else if (kind == "Replace") {
      std::string literal;
      std::shared_ptr<Regex> regex;
      pattern(j.value("pattern", json()), where, literal, regex);
      if (regex)
        throw LoadError(where + ": a Replace normalizer with a Regex pattern is not supported");
      normalizers.push_back({Normalizer::Replace, literal, str(j, "content", where)});
    } else if (kind == "Prepend") {
      normalizers.push_back({Normalizer::Prepend, str(j, "prepend", where), ""});
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
    if (kind == "Split") {
      p.kind = PreTokenizer::Split;
      pattern(j.value("pattern", json()), where, p.literal, p.regex);
      p.behavior = str(j, "behavior", where);
      for (char &c : p.behavior)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (p.behavior == "mergedwithprevious")
        p.behavior = "merged_with_previous";
      if (p.behavior == "mergedwithnext")
        p.behavior = "merged_with_next";
      if (p.behavior != "isolated" && p.behavior != "removed" &&
          p.behavior != "merged_with_previous" && p.behavior != "merged_with_next")
        throw LoadError(where + ".behavior: '" + p.behavior + "' is not supported");
      p.invert = field(j, "invert", false, where);
    } else if (kind == "ByteLevel") {
      p.kind = PreTokenizer::ByteLevel;
      p.addPrefixSpace = field(j, "add_prefix_space", false, where);
      p.useRegex = field(j, "use_regex", true, where);
    } else if (kind == "Metaspace") {
      p.kind = PreTokenizer::Metaspace;
      p.replacement = field(j, "replacement", std::string("\xE2\x96\x81"), where);
      p.prependScheme = field(j, "prepend_scheme", std::string("always"), where);
      if (j.contains("add_prefix_space") && !j.contains("prepend_scheme"))
        p.prependScheme = field(j, "add_prefix_space", true, where) ? "always" : "never";
      p.split = field(j, "split", true, where);
      if (p.prependScheme != "first" && p.prependScheme != "always" && p.prependScheme != "never")
        throw LoadError(where + ".prepend_scheme: '" + p.prependScheme + "' is not supported");
    } else {
      throw LoadError(where + ": pre-tokenizer type '" + kind + "' is not supported");
    }
    preTokenizers.push_back(std::move(p));
  }

  void loadDecoder(const json &j, const std::string &where) {
    if (j.is_null())
      return;
    std::string kind = kindOf(j);
    Decoder d;
    if (kind == "Sequence") {
      if (!j.contains("decoders") || !j["decoders"].is_array())
        throw LoadError(where + ".decoders: missing or not a list");
      for (size_t i = 0; i < j["decoders"].size(); ++i)
        loadDecoder(j["decoders"][i], where + ".decoders[" + std::to_string(i) + "]");
      return;
    }
    if (kind == "Replace") {
      std::shared_ptr<Regex> regex;
      pattern(j.value("pattern", json()), where, d.a, regex);
      if (regex)
        throw LoadError(where + ": a Replace decoder with a Regex pattern is not supported");
      d.kind = Decoder::Replace;
      d.b = str(j, "content", where);
    } else if (kind == "ByteFallback") {
      d.kind = Decoder::ByteFallback;
    } else if (kind == "Fuse") {
      d.kind = Decoder::Fuse;
    } else if (kind == "Strip") {
      d.kind = Decoder::Strip;
      d.a = str(j, "content", where);
      d.start = field<size_t>(j, "start", 0, where);
      d.stop = field<size_t>(j, "stop", 0, where);
    } else if (kind == "Metaspace") {
      d.kind = Decoder::Metaspace;
      d.a = field(j, "replacement", std::string("\xE2\x96\x81"), where);
      d.prependScheme = field(j, "prepend_scheme", std::string("always"), where);
    } else if (kind == "ByteLevel") {
      d.kind = Decoder::ByteLevel;
    } else {
      throw LoadError(where + ": decoder type '" + kind + "' is not supported");
    }
    decoders.push_back(std::move(d));
  }

  int64_t tokenId(const std::string &tok, const std::string &where) const {
    auto it = vocab.find(tok);
    if (it != vocab.end())
      return it->second;
    for (const Added &a : added)
      if (a.content == tok)
        return a.id;
    throw LoadError(where + ": token '" + tok + "' is not in the vocabulary");
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
      for (const json &item : j["single"]) {
        if (item.contains("Sequence")) {
          post.push_back({true, {}});
        } else if (item.contains("SpecialToken")) {
          std::string name = str(item["SpecialToken"], "id", where + ".single");
          std::vector<int64_t> ids;
          if (specials.contains(name) && specials[name].contains("ids") &&
              specials[name]["ids"].is_array()) {
            for (const json &v : specials[name]["ids"])
              ids.push_back(v.get<int64_t>());
          } else {
            ids.push_back(tokenId(name, where + ".special_tokens"));
          }
          post.push_back({false, ids});
        } else {
          throw LoadError(where + ".single: an item neither Sequence nor SpecialToken");
        }
      }
    } else if (kind == "BertProcessing" || kind == "RobertaProcessing") {
      auto tokenOf = [&](const char *key) {
        if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2)
          throw LoadError(where + "." + key + ": missing or not [token, id]");
        return j[key][1].get<int64_t>();
      };
      post = {{false, {tokenOf("cls")}}, {true, {}}, {false, {tokenOf("sep")}}};
    } else {
      throw LoadError(where + ": post-processor type '" + kind + "' is not supported");
    }
  }
};

namespace {

json readJson(const std::string &path, bool required, bool &found) {
  std::string text;
  found = readFile(path, text);
  if (!found) {
    if (required)
      throw LoadError(path + ": cannot be opened");
    return json();
  }
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

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string &dir, std::string &error) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  TokenizerImpl &t = *tok->impl_;
  std::string file = dir + "/tokenizer.json";
  t.file = file;
  try {
    bool found = false;
    json j = readJson(file, true, found);
    std::string cfgFile = dir + "/tokenizer_config.json";
    json cfg = readJson(cfgFile, false, found);
    if (!found)
      cfg = json::object();

    if (!j.contains("model") || !j["model"].is_object())
      throw LoadError(file + ": model: missing or not an object");
    const json &model = j["model"];
    std::string kind = model.contains("type") ? kindOf(model) : "BPE";
    if (kind != "BPE")
      throw LoadError(file + ": model.type: a " + kind +
                      " model is not supported (tpc reads BPE tokenizers only)");
    if (!model.contains("vocab") || !model["vocab"].is_object())
      throw LoadError(file + ": model.vocab: missing or not an object");
    t.vocab.reserve(model["vocab"].size());
    t.idToToken.reserve(model["vocab"].size());
    for (auto &[tokStr, idJ] : model["vocab"].items()) {
      if (!idJ.is_number_integer())
        throw LoadError(file + ": model.vocab[" + json(tokStr).dump() + "]: not an integer id");
      t.vocab[tokStr] = idJ.get<int64_t>();
      t.idToToken[idJ.get<int64_t>()] = tokStr;
    }
    if (!model.contains("merges") || !model["merges"].is_array())
      throw LoadError(file + ": model.merges: missing or not a list");
    t.merges.reserve(model["merges"].size());
    uint32_t rank = 0;
    for (const json &m : model["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        std::string s = m.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos)
          throw LoadError(file + ": model.merges[" + std::to_string(rank) + "]: not 'a b'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        throw LoadError(file + ": model.merges[" + std::to_string(rank) + "]: not a pair");
      }
      auto ia = t.vocab.find(a), ib = t.vocab.find(b), im = t.vocab.find(a + b);
      if (ia == t.vocab.end() || ib == t.vocab.end() || im == t.vocab.end())
        throw LoadError(file + ": model.merges[" + std::to_string(rank) + "]: '" + a + " " + b +
                        "' has a part or a result not in the vocabulary");
      t.merges.emplace(TokenizerImpl::pairKey(ia->second, ib->second),
                       std::make_pair(rank, im->second));
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

    // Added tokens.
    if (j.contains("added_tokens")) {
      if (!j["added_tokens"].is_array())
        throw LoadError(file + ": added_tokens: not a list");
      for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
        const json &a = j["added_tokens"][i];
        std::string where = file + ": added_tokens[" + std::to_string(i) + "]";
        if (!a.contains("id") || !a["id"].is_number_integer())
          throw LoadError(where + ".id: missing or not an integer");
        TokenizerImpl::Added tokA{
            str(a, "content", where),
            a["id"].get<int64_t>(),
            field(a, "special", false, where),
            field(a, "lstrip", false, where),
            field(a, "rstrip", false, where),
            field(a, "single_word", false, where),
            field(a, "normalized", !field(a, "special", false, where), where)};
        t.addedIds[tokA.id] = tokA.special;
        t.idToToken[tokA.id] = tokA.content;
        t.added.push_back(tokA);
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
    int64_t nextId = 0;
    for (auto &[id, tokStr] : t.idToToken)
      nextId = std::max(nextId, id + 1);
    for (const char *key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                            "cls_token", "mask_token"}) {
      std::string s = named(key);
      if (s.empty() || std::any_of(t.added.begin(), t.added.end(),
                                   [&](const TokenizerImpl::Added &a) { return a.content == s; }))
        continue;
      auto v = t.vocab.find(s);
      int64_t id = v != t.vocab.end() ? v->second : nextId++;
      t.added.push_back({s, id, true, false, false, false, false});
      t.addedIds[id] = true;
      t.idToToken[id] = s;
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
      t.decoders = {{Decoder::Replace, space, " "}, {Decoder::ByteFallback}, {Decoder::Fuse}};
      if (addPrefixSpace) {
        Decoder strip{Decoder::Strip, " ", ""};
        strip.start = 1;
        t.decoders.push_back(strip);
      }
    } else if (cls == "GemmaTokenizer") {
      t.byteFallback = true;
      t.fuseUnk = true;
      t.ignoreMerges = false;
      std::string unkTok = cfg.contains("unk_token") ? configToken(cfg, "unk_token") : "<unk>";
      auto u = t.vocab.find(unkTok);
      t.unk = u != t.vocab.end() ? std::optional<int64_t>(u->second) : std::nullopt;
      t.normalizers = {{Normalizer::Replace, " ", space}};
      PreTokenizer p;
      p.kind = PreTokenizer::Split;
      p.literal = " ";
      p.behavior = "merged_with_previous";
      t.preTokenizers = {p};
      t.decoders = {{Decoder::Replace, space, " "}, {Decoder::ByteFallback}, {Decoder::Fuse}};
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
        t.normalizers = {{Normalizer::NFC, "", ""}};
        PreTokenizer split;
        split.kind = PreTokenizer::Split;
        split.regex = std::make_shared<Regex>(kQwen2Pattern, "Qwen2Tokenizer's pattern");
        split.behavior = "isolated";
        t.preTokenizers.push_back(split);
        bl.useRegex = false;
      }
      t.preTokenizers.push_back(bl);
      t.decoders = {{Decoder::ByteLevel}};
    } else {
      t.loadNormalizer(j.value("normalizer", json()), file + ": normalizer");
      t.loadPreTokenizer(j.value("pre_tokenizer", json()), file + ": pre_tokenizer");
      t.loadDecoder(j.value("decoder", json()), file + ": decoder");
    }

    // Added tokens matched after normalization are matched in their normalized form, as the
    // tokenizers library does; longest first.
    // Decoding gives such a token in that form too (the decoders then turn "\u2581is\u2581a"
    // back into " is a", where the content "is a" would lose its space).
    for (TokenizerImpl::Added &a : t.added) {
      a.pattern = a.normalized ? t.normalize(a.content) : a.content;
      t.idToToken[a.id] = a.pattern;
    }
    std::stable_sort(t.added.begin(), t.added.end(),
                     [](const TokenizerImpl::Added &x, const TokenizerImpl::Added &y) {
                       return x.pattern.size() > y.pattern.size();
                     });

    // The post-processor: the file's. transformers ignores add_bos_token and add_eos_token of
    // tokenizer_config.json when there is a tokenizer.json, and with no post-processor in it
    // builds one that adds neither.
    t.loadPostProcessor(j.value("post_processor", json()), file + ": post_processor");
  } catch (const LoadError &e) {
    error = e.what();
    return nullptr;
  } catch (const json::exception &e) {
    error = file + ": " + e.what();
    return nullptr;
  }
  return tok;
}

std::vector<int64_t> Tokenizer::encode(const std::string &text, bool addSpecial) const {
  std::vector<int64_t> ids = impl_->encode(text);
  if (!addSpecial || impl_->post.empty())
    return ids;
  std::vector<int64_t> out;
  for (const PostItem &item : impl_->post)
    out.insert(out.end(), item.isSequence ? ids.begin() : item.ids.begin(),
               item.isSequence ? ids.end() : item.ids.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t> &ids, bool skipSpecial) const {
  return impl_->decode(ids, skipSpecial);
}

std::optional<int64_t> Tokenizer::id(const std::string &token) const {
  for (const TokenizerImpl::Added &a : impl_->added)
    if (a.content == token)
      return a.id;
  auto it = impl_->vocab.find(token);
  if (it != impl_->vocab.end())
    return it->second;
  return std::nullopt;
}

const std::string &Tokenizer::bosToken() const { return impl_->bos; }
const std::string &Tokenizer::eosToken() const { return impl_->eos; }

namespace {
bool endsIncomplete(const std::string &s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
} // namespace

std::string Tokenizer::Stream::push(int64_t id) {
  ids_.push_back(id);
  std::vector<int64_t> window(ids_.begin() + prefix_, ids_.begin() + read_);
  std::string before = tok_->decode(window, skipSpecial_);
  window.assign(ids_.begin() + prefix_, ids_.end());
  std::string now = tok_->decode(window, skipSpecial_);
  // A trailing U+FFFD is bytes of a character not yet complete: hold them back.
  if (now.size() <= before.size() || endsIncomplete(now) ||
      now.compare(0, before.size(), before) != 0)
    return "";
  prefix_ = read_;
  read_ = ids_.size();
  return now.substr(before.size());
}

std::string Tokenizer::Stream::finish() {
  std::vector<int64_t> window(ids_.begin() + prefix_, ids_.begin() + read_);
  std::string before = tok_->decode(window, skipSpecial_);
  window.assign(ids_.begin() + prefix_, ids_.end());
  std::string now = tok_->decode(window, skipSpecial_);
  prefix_ = read_ = ids_.size();
  return now.size() > before.size() ? now.substr(before.size()) : "";
}

} // namespace tpcrt
