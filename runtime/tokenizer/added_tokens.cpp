// The added tokens: tokenizer.json's added_tokens and the special tokens
// tokenizer_config.json names, numbered as the tokenizers library's AddedVocabulary numbers
// them, and cut out of a text before anything else sees it (leftmost, the longest there), in
// time linear in the text.
#include "tokenizer_impl.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <limits>

namespace tpcrt {
namespace tokenizer_detail {

// An Aho-Corasick automaton of the reversed tokens, run over the text backwards: a token that
// starts at i is one that ends at i of the reversed text, and a node's output link gives the
// longest.
void AddedMatcher::build(const std::vector<std::string> &patterns) {
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
  // own_: a node's own pattern; next_: the deepest node on its failure chain that has one.
  own_ = best_;
  next_.assign(best_.size(), 0);
  for (uint32_t v : order) {
    if (v == 0)
      continue;
    uint32_t f = fail_[v];
    next_[v] = own_[f] >= 0 ? f : next_[f];
    if (best_[v] < 0)
      best_[v] = best_[f];
  }
}

uint32_t AddedMatcher::step(uint32_t state, unsigned char c) const {
  for (;;) {
    auto it = edges_.find(key(state, c));
    if (it != edges_.end())
      return it->second;
    if (state == 0)
      return 0;
    state = fail_[state];
  }
}

void AddedMatcher::allAt(const std::string &text,
                         const std::function<void(size_t, int32_t)> &visit) const {
  uint32_t state = 0;
  for (size_t i = text.size(); i-- > 0;) {
    state = step(state, static_cast<unsigned char>(text[i]));
    for (uint32_t v = own_[state] >= 0 ? state : next_[state]; v != 0; v = next_[v])
      visit(i, own_[v]);
  }
}

void AddedMatcher::longestAt(const std::string &text, std::vector<int32_t> &out) const {
  out.assign(text.size(), -1);
  uint32_t state = 0;
  for (size_t i = text.size(); i-- > 0;) {
    state = step(state, static_cast<unsigned char>(text[i]));
    out[i] = best_[state];
  }
}

namespace {

/// Whether the character before (or at) `pos` is a word character as Rust's regex `\w` says
/// (alphabetic, a mark, a decimal digit, a connector, a joiner): single_word tokens need
/// none on either side.
bool isWordChar(const std::string &s, size_t pos, bool before) {
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

} // namespace
} // namespace tokenizer_detail

using namespace tokenizer_detail;

void TokenizerImpl::loadAddedTokens(const json &list, const std::string &where) {
  // The ids the tokenizers library gives them: it ignores the file's id, so one that differs
  // is refused rather than followed or silently renumbered.
  if (!list.is_array())
    throw LoadError(where + ": not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const json &a = list[i];
    std::string at = where + "[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("id"))
      throw LoadError(at + ".id: missing");
    uint32_t id = idOf(a["id"], at + ".id");
    Added tok{str(a, "content", at),
              id,
              field(a, "special", false, at),
              field(a, "lstrip", false, at),
              field(a, "rstrip", false, at),
              field(a, "single_word", false, at),
              field(a, "normalized", !field(a, "special", false, at), at),
              ""};
    if (tok.content.empty())
      continue; // the tokenizers library ignores it
    addToken(std::move(tok), id, at);
  }
}

uint64_t TokenizerImpl::addedIdFor(const std::string &content) const {
  if (auto v = vocab.find(content); v != vocab.end())
    return v->second;
  if (auto a = addedByContent.find(content); a != addedByContent.end())
    return a->second;
  auto size = static_cast<int64_t>(vocab.size());
  return maxAdded >= 0 && (maxAdded >= size || size == 0) ? uint64_t(maxAdded) + 1 : uint64_t(size);
}

void TokenizerImpl::addToken(Added tok, std::optional<uint32_t> fileId, const std::string &where) {
  bounded(tok.content, where + ".content", limits);
  if (added.size() >= limits.maxAddedTokens)
    throw LoadError(where + ": " + beyond(limits.maxAddedTokens, "added tokens", "maxAddedTokens"));
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

void TokenizerImpl::buildMatchers() {
  // Added tokens matched after normalization are matched in their normalized form, as the
  // tokenizers library does.
  // Decoding gives such a token in that form too (the decoders then turn "\u2581is\u2581a"
  // back into " is a", where the content "is a" would lose its space).
  // The matchers list special tokens first, as the library does: among tokens that match
  // the same text, the first wins.
  std::vector<std::string> raw, normalized;
  for (bool special : {true, false}) {
    for (size_t i = 0; i < added.size(); ++i) {
      Added &a = added[i];
      if (a.special != special)
        continue;
      a.pattern = a.normalized ? normalize(normalizers, a.content) : a.content;
      idToToken[a.id] = a.pattern;
      (a.normalized ? normalized : raw).push_back(a.pattern);
      (a.normalized ? normalizedAdded : rawAdded).push_back(i);
      idEnd = std::max<int64_t>(idEnd, int64_t(a.id) + 1);
    }
  }
  rawMatcher.build(raw);
  normalizedMatcher.build(normalized);
}

void TokenizerImpl::splitAdded(const std::string &text, const AddedMatcher &matcher,
                               const std::vector<size_t> &which,
                               const std::function<void(size_t, size_t)> &segment,
                               const std::function<void(uint32_t)> &token) const {
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

} // namespace tpcrt
