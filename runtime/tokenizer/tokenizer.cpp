// The Tokenizer of tpcrt/tokenizer.h: a pipeline as the `tokenizers` library runs it. Added
// tokens are cut out of the text first (leftmost, the longest there), each remaining segment
// is normalized, pre-tokenized into pieces and each piece merged by the model; the
// post-processor adds BOS/EOS. Decoding maps ids to token strings and runs the decoder chain
// over them, as a stream (decoders.cpp). Each step is the file of its kind (components.h,
// models.cpp, added_tokens.cpp); builder.cpp makes a Tokenizer from tokenizer.json.
//
// tokenizer.json and the text are untrusted: every resource either controls is bounded by a
// TokenizerLimits field, text reaches PCRE2 and ICU only once it is known to be valid UTF-8,
// and costs are linear in the text (added-token matching, literal patterns, streaming) or
// n log n (BPE merges).
#include "tpcrt/tokenizer.h"

#include "regex.h"
#include "tokenizer_impl.h"
#include "tpcrt/utf8.h"

#include <cstdio>
#include <limits>

namespace tpcrt {

using namespace tokenizer_detail;

void TokenizerImpl::encodeSegment(const std::string &text, bool first, RegexBudget &budget,
                                  std::vector<int64_t> &out) const {
  if (text.empty())
    return;
  std::string norm = normalize(normalizers, text);
  splitAdded(
      norm, normalizedMatcher, normalizedAdded,
      [&](size_t b, size_t e) {
        if (e > b)
          for (const Piece &p : preTokenize(
                   preTokenizers, {{norm.substr(b, e - b), first && b == 0}}, limits, budget))
            bpe(p.text, out);
      },
      [&](uint32_t id) { out.push_back(id); });
}

namespace {

/// Refuses text that is not valid UTF-8, naming the first bad byte.
void requireUtf8(const std::string &text) {
  size_t bad = firstInvalidUtf8(text);
  if (bad != std::string::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[bad]));
    throw EncodeError("not valid UTF-8: byte " + std::string(byte) + " at offset " +
                      std::to_string(bad) + " begins no valid character");
  }
}

} // namespace

std::vector<int64_t> TokenizerImpl::encode(const std::string &text) const {
  requireUtf8(text);
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

Tokenizer::Tokenizer() : impl_(std::make_unique<TokenizerImpl>()) {}
Tokenizer::~Tokenizer() = default;

std::optional<std::vector<int64_t>> Tokenizer::encode(const std::string &text, bool addSpecial,
                                                      std::string &error) const {
  std::vector<int64_t> ids;
  try {
    if (impl_->sentencePiece) { // BOS and EOS are its own
      requireUtf8(text);
      return impl_->sentencePiece->encode(text, addSpecial);
    }
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
  return postProcess(impl_->post, ids);
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

Tokenizer::VocabularyForm Tokenizer::vocabularyForm() const {
  using tokenizer_detail::Decoder;
  VocabularyForm form;
  for (const Decoder &d : impl_->decoders) {
    if (d.kind == Decoder::ByteLevel)
      form.kind = VocabularyForm::ByteLevel;
    else if (d.kind == Decoder::ByteFallback && form.kind == VocabularyForm::Raw)
      form.kind = VocabularyForm::ByteFallback;
    if ((d.kind == Decoder::Metaspace && !d.prependNever) ||
        (d.kind == Decoder::Strip && d.start > 0))
      form.prefixSpace = true;
  }
  if (impl_->byteFallback && form.kind == VocabularyForm::Raw)
    form.kind = VocabularyForm::ByteFallback;
  return form;
}

std::optional<std::string> Tokenizer::token(int64_t id) const {
  if (id < 0 || id > int64_t(UINT32_MAX))
    return std::nullopt;
  if (impl_->addedIds.count(uint32_t(id)))
    for (const TokenizerImpl::Added &a : impl_->added)
      if (a.id == uint32_t(id))
        return a.content;
  auto it = impl_->idToToken.find(uint32_t(id));
  if (it != impl_->idToToken.end())
    return it->second;
  return std::nullopt;
}

int64_t Tokenizer::idEnd() const { return impl_->idEnd; }
const std::string &Tokenizer::bosToken() const { return impl_->bos; }
const std::string &Tokenizer::eosToken() const { return impl_->eos; }

} // namespace tpcrt
