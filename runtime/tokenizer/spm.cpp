// SentencePieceEncoder: a "llama" (SentencePiece) vocabulary encoded as llama.cpp b11434
// encodes it (src/llama-vocab.cpp: tokenizer_st_partition, llm_tokenizer_spm_session and
// tokenize's LLAMA_VOCAB_TYPE_SPM case), which is what SentencePiece's BPE model does with no
// normalization. tpc uses it for the GGUF architectures where transformers 5.17 builds another
// tokenizer than the model's (gemma's Unigram, phi3's BPE without spaces); llama-tokenize is
// its oracle (conformance/tokenizers-spm-llama-cpp.test).
//
// Cost: cutting the special tokens out is linear in the text and the places special tokens are
// found (an Aho-Corasick pass), times a log; merging is n log n in the characters of a
// stretch, each candidate pair looked up once.
#include "text.h"
#include "tokenizer_impl.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <queue>
#include <string_view>

namespace tpcrt {
namespace tokenizer_detail {

namespace {

/// The byte length of the UTF-8 character that begins with `lead` (llama.cpp's
/// unicode_len_utf8; the text is valid UTF-8 here, so it is exact).
size_t charLength(unsigned char lead) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[lead >> 4];
}

/// A stretch of the text: raw text [begin, end), or a special token.
struct Fragment {
  size_t begin = 0, end = 0;
  int64_t token = -1; // >= 0: a special token
};

} // namespace

void SentencePieceEncoder::encodeRaw(const std::string &text, std::vector<int64_t> &out) const {
  struct Symbol {
    size_t at, n; // bytes of the text; n 0 once merged into the symbol on its left
    int64_t prev, next;
  };
  struct Pair {
    int64_t left, right;
    float score;
    size_t size;
  };
  // The best score first; of equal ones, the leftmost.
  auto worse = [](const Pair &a, const Pair &b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Symbol> symbols;
  for (size_t at = 0; at < text.size();) {
    size_t n = std::min(charLength(static_cast<unsigned char>(text[at])), text.size() - at);
    int64_t index = int64_t(symbols.size());
    symbols.push_back({at, n, index - 1, at + n == text.size() ? -1 : index + 1});
    at += n;
  }
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> queue(worse);
  auto tryPair = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0)
      return;
    std::string_view both(text.data() + symbols[left].at, symbols[left].n + symbols[right].n);
    auto it = ids.find(std::string(both));
    if (it == ids.end())
      return;
    queue.push({left, right, scores[it->second], both.size()});
  };
  for (int64_t i = 1; i < int64_t(symbols.size()); ++i)
    tryPair(i - 1, i);
  while (!queue.empty()) {
    Pair p = queue.top();
    queue.pop();
    Symbol &left = symbols[p.left], &right = symbols[p.right];
    // A side merged since, or grown: the pair is stale.
    if (left.n == 0 || right.n == 0 || left.n + right.n != p.size)
      continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0)
      symbols[right.next].prev = p.left;
    tryPair(left.prev, p.left);
    tryPair(p.left, left.next);
  }
  // Every merged symbol is a token; a character that is none becomes its bytes' tokens
  // (llama.cpp's resegment finds nothing to split it back into), or unk where the vocabulary
  // has no token for a byte (llama.cpp fails there).
  for (int64_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const Symbol &s = symbols[i];
    auto it = ids.find(text.substr(s.at, s.n));
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (size_t j = 0; j < s.n; ++j) {
      int64_t id = byteIds[static_cast<unsigned char>(text[s.at + j])];
      out.push_back(id >= 0 ? id : int64_t(*unk));
    }
  }
}

std::vector<int64_t> SentencePieceEncoder::encode(const std::string &text,
                                                  bool addSpecial) const {
  // Special tokens cut the text as tokenizer_st_partition (with parse_special) cuts it: each in
  // turn, the longest first, takes every place it is found left to right in what earlier ones
  // left raw, and (rstrip) the whitespace after it, which is dropped. Done here from one pass
  // over the text that finds every place of every special token (llama.cpp searches the text
  // once for each special token, which hostile text makes slow with many of them).
  std::vector<std::pair<int32_t, size_t>> found; // (special, start)
  matcher.allAt(text, [&](size_t at, int32_t special) { found.emplace_back(special, at); });
  std::sort(found.begin(), found.end());
  std::map<size_t, std::pair<size_t, int64_t>> taken; // start -> (end, token; -1: dropped)
  for (const auto &[index, at] : found) {
    const Special &sp = specials[index];
    size_t end = at + sp.text.size();
    auto after = taken.upper_bound(at);
    if (after != taken.end() && after->first < end)
      continue; // overlaps what a special token took before
    if (after != taken.begin() && std::prev(after)->second.first > at)
      continue;
    taken.emplace(at, std::make_pair(end, int64_t(sp.id)));
    if (sp.rstrip) {
      size_t limit = after == taken.end() ? text.size() : after->first, ws = end;
      while (ws < limit && std::isspace(static_cast<unsigned char>(text[ws])))
        ++ws;
      if (ws > end)
        taken.emplace(end, std::make_pair(ws, int64_t(-1)));
    }
  }
  std::vector<Fragment> fragments;
  size_t raw = 0;
  for (const auto &[at, what] : taken) {
    if (at > raw)
      fragments.push_back({raw, at, -1});
    if (what.second >= 0)
      fragments.push_back({0, 0, what.second});
    raw = what.first;
  }
  if (raw < text.size())
    fragments.push_back({raw, text.size(), -1});

  std::vector<int64_t> out;
  if (addSpecial && addBos)
    out.push_back(*bos);
  bool afterSpecial = true; // the text's start counts as one
  for (const Fragment &f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      afterSpecial = true;
      continue;
    }
    std::string raw = addSpacePrefix && afterSpecial ? " " : "";
    raw.append(text, f.begin, f.end - f.begin);
    std::string escaped;
    escaped.reserve(raw.size() + raw.size() / 2);
    for (char c : raw) {
      if (c == ' ')
        escaped += "\xE2\x96\x81"; // U+2581
      else
        escaped += c;
    }
    encodeRaw(escaped, out);
    afterSpecial = false;
  }
  if (addSpecial && addEos)
    out.push_back(*eos);
  return out;
}

} // namespace tokenizer_detail
} // namespace tpcrt
