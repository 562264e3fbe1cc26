// SentencePieceEncoder: a "llama" (SentencePiece) vocabulary encoded as llama.cpp b11434
// encodes it (src/llama-vocab.cpp: tokenizer_st_partition, llm_tokenizer_spm_session and
// tokenize's LLAMA_VOCAB_TYPE_SPM case), which is what SentencePiece's BPE model does with no
// normalization. tpc uses it for the GGUF architectures where transformers 5.17 builds another
// tokenizer than the model's (gemma's Unigram, phi3's BPE without spaces); llama-tokenize is
// its oracle (conformance/tokenizers-spm-llama-cpp.test).
//
// Cost: cutting the special tokens out is one substring search a special token (as llama.cpp
// does); merging is n log n in the characters of a stretch, each candidate pair looked up once.
#include "text.h"
#include "tokenizer_impl.h"

#include <cctype>
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
  // Special tokens cut the raw stretches, the longest token first, each at every place it is
  // found left to right, as tokenizer_st_partition (with parse_special) does.
  std::vector<Fragment> fragments;
  if (!text.empty())
    fragments.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (const Special &sp : specials) {
    if (text.find(sp.text) == std::string::npos)
      continue;
    next.clear();
    for (const Fragment &f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      while (begin < f.end) {
        size_t match = std::string_view(text.data(), f.end).find(sp.text, begin);
        if (match == std::string_view::npos) {
          next.push_back({begin, f.end, -1});
          break;
        }
        if (match > begin)
          next.push_back({begin, match, -1});
        next.push_back({0, 0, int64_t(sp.id)});
        begin = match + sp.text.size();
        if (sp.rstrip)
          while (begin < f.end && std::isspace(static_cast<unsigned char>(text[begin])))
            ++begin;
      }
    }
    fragments.swap(next);
  }

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
