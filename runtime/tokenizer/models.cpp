// The model: BPE, the one model kind tpc reads (byte-level as GPT-2, Llama 3 and Qwen2 use;
// SentencePiece-style with byte fallback as Llama 2, Mistral and Gemma use). Its vocabulary and
// merges from tokenizer.json, and the merging of a pre-tokenized piece into ids, n log n in
// the piece's length.
#include "tokenizer_impl.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>
#include <tuple>

namespace tpcrt {

using namespace tokenizer_detail;

namespace {

/// model.vocab: token -> id, every id a different token's.
void loadVocab(TokenizerImpl &t, const json &model, const TokenizerSource &source) {
  const TokenizerLimits &limits = t.limits;
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
      throw LoadError(where + ": id " + std::to_string(id) + " is " + shown(it->second) + "'s too");
    t.vocab.emplace(tokStr, id);
    t.idEnd = std::max<int64_t>(t.idEnd, int64_t(id) + 1);
  }
}

/// model.merges, by rank: "a b" or ["a", "b"], each part and the result in the vocabulary.
void loadMerges(TokenizerImpl &t, const json &model, const TokenizerSource &source) {
  const TokenizerLimits &limits = t.limits;
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
      throw LoadError(source.merges + "[" + std::to_string(rank) + "]: " + shown(a + " " + b) +
                      " has a part or a result not in the vocabulary");
    // A pair listed twice takes its later rank, as the tokenizers library's map does.
    t.merges[TokenizerImpl::pairKey(ia->second, ib->second)] = {rank, im->second};
    ++rank;
  }
}

} // namespace

void TokenizerImpl::loadModel(const json &model, const TokenizerSource &source) {
  const std::string &file = source.file;
  std::string kind = model.contains("type") ? kindOf(model) : "BPE";
  if (kind != "BPE")
    throw LoadError(file + ": model.type: a " + kind +
                    " model is not supported (tpc reads BPE tokenizers only)");
  loadVocab(*this, model, source);
  loadMerges(*this, model, source);
  byteFallback = field(model, "byte_fallback", false, file + ": model");
  fuseUnk = field(model, "fuse_unk", false, file + ": model");
  ignoreMerges = field(model, "ignore_merges", false, file + ": model");
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = vocab.find(model["unk_token"].get<std::string>());
    if (it != vocab.end())
      unk = it->second;
  }
}

void TokenizerImpl::bpe(const std::string &word, std::vector<int64_t> &out) const {
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

} // namespace tpcrt
