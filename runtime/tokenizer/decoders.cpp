// Decoders: ids back to text (Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel, and
// Sequence, their chain), run as a stream so that decode() and Tokenizer::Stream always agree:
// decode() is a stream pushed all at once.
//
// Each decoder of the chain is a stage that takes its input as it comes and passes on what no
// later input can change. Tokens go from stage to stage until the first one that joins them
// into one (Fuse, ByteLevel); every stage after it sees that one token, the text, in pieces.
// Before the join, Replace, Strip and Metaspace see each token whole, as a text of its own.
#include "components.h"
#include "tokenizer_impl.h"

#include <algorithm>
#include <limits>

namespace tpcrt {
namespace tokenizer_detail {

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

namespace {

/// One decoder of type `kind`, which is not a Sequence.
Decoder readDecoder(const json &j, const std::string &kind, const std::string &where,
                    const TokenizerLimits &limits) {
  Decoder d;
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
    std::string scheme;
    metaspaceFields(j, where, d.content, scheme);
    d.prependNever = scheme == "never";
  } else if (kind == "ByteLevel") {
    d.kind = Decoder::ByteLevel;
  } else {
    throw LoadError(where + ": decoder type '" + kind + "' is not supported");
  }
  return d;
}

} // namespace

void loadDecoder(const json &j, const std::string &where, const TokenizerLimits &limits,
                 std::vector<Decoder> &chain) {
  loadChain(j, "decoders", "decoders", where, limits, chain, readDecoder);
}

double decoderGrowth(const std::vector<Decoder> &chain) {
  double d = 1;
  for (const Decoder &dec : chain) {
    if (dec.kind == Decoder::Replace)
      d *= std::max(1.0, double(dec.content.size()) / double(dec.pattern.text.size()));
    else if (dec.kind == Decoder::ByteLevel) // a 2-byte character to a byte, to U+FFFD
      d *= 2;
  }
  return d;
}

} // namespace tokenizer_detail

using namespace tokenizer_detail;

const std::string *TokenizerImpl::tokenOf(int64_t id, bool skipSpecial) const {
  if (id < 0 || id > std::numeric_limits<uint32_t>::max())
    return nullptr;
  auto a = addedIds.find(static_cast<uint32_t>(id));
  if (a != addedIds.end() && a->second && skipSpecial)
    return nullptr;
  auto it = idToToken.find(static_cast<uint32_t>(id));
  return it != idToToken.end() ? &it->second : nullptr;
}

DecodeStream::DecodeStream(const TokenizerImpl &tok, bool skipSpecial, bool incremental)
    : tok(tok), skipSpecial(skipSpecial), incremental(incremental) {
  build();
}

DecodeStream::~DecodeStream() = default;

std::string DecodeStream::push(int64_t id) {
  const std::string *t = tok.tokenOf(id, skipSpecial);
  if (!t)
    return "";
  return run({*t}, /*last=*/false);
}

std::string DecodeStream::finish() {
  std::string out = run({}, /*last=*/true);
  build(); // what comes next is a new text
  return out;
}

void DecodeStream::build() {
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
std::string DecodeStream::run(std::vector<std::string> toks, bool last) {
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

} // namespace tpcrt
