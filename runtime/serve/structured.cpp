// Structured outputs (structured.h): xgrammar's compiler and matcher behind the engine's
// TokenConstraint, where this build has it (TPC_HAVE_XGRAMMAR).
#include "structured.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <future>
#include <set>
#include <thread>

#if TPC_HAVE_XGRAMMAR
#include <xgrammar/xgrammar.h>
#endif

namespace tpcrt::serve {

namespace {

/// The keywords a schema may use: the issue's list, what the openai client's parse() writes
/// for pydantic models, and annotations that constrain nothing.
const std::set<std::string> kSchemaKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "anyOf", "$ref", "$defs", "definitions", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
    // annotations
    "title", "description", "default", "examples", "$schema", "$id", "$comment"};

std::string checkAt(const nlohmann::ordered_json &schema, const std::string &at, int depth) {
  if (depth > 64)
    return "the schema nests more than 64 levels deep (at " + at + ")";
  if (schema.is_boolean())
    return "";
  if (!schema.is_object())
    return "a schema must be an object, not " + schema.dump().substr(0, 40) + " (at " + at + ")";
  for (const auto &[key, value] : schema.items()) {
    if (!kSchemaKeywords.count(key))
      return "keyword '" + key + "' is not supported (at " + at + ")";
    switch (subschemasOf(key)) {
    case Subschemas::ByName:
      if (!value.is_object())
        return "'" + key + "' must be an object (at " + at + ")";
      for (const auto &[name, sub] : value.items())
        if (std::string bad = checkAt(sub, at + "/" + key + "/" + name, depth + 1); !bad.empty())
          return bad;
      break;
    case Subschemas::One:
      if (std::string bad = checkAt(value, at + "/" + key, depth + 1); !bad.empty())
        return bad;
      break;
    case Subschemas::List:
      if (!value.is_array() || value.empty())
        return "'" + key + "' must be a non-empty list of schemas (at " + at + ")";
      for (size_t i = 0; i < value.size(); ++i)
        if (std::string bad = checkAt(value[i], at + "/" + key + "/" + std::to_string(i), depth + 1);
            !bad.empty())
          return bad;
      break;
    case Subschemas::None:
      break;
    }
  }
  return "";
}

} // namespace

Subschemas subschemasOf(const std::string &keyword) {
  if (keyword == "properties" || keyword == "$defs" || keyword == "definitions")
    return Subschemas::ByName;
  if (keyword == "anyOf")
    return Subschemas::List;
  if (keyword == "items" || keyword == "additionalProperties")
    return Subschemas::One;
  return Subschemas::None;
}

std::string checkSchemaKeywords(const nlohmann::ordered_json &schema) {
  return checkAt(schema, "#", 0);
}

namespace {

/// "" where `spec`'s text is within kMaxGrammarBytes, else what is over.
[[maybe_unused]] std::string tooLarge(const StructuredSpec &spec) {
  size_t bytes = spec.text.size();
  for (const std::string &choice : spec.choices)
    bytes += choice.size();
  if (bytes <= kMaxGrammarBytes)
    return "";
  return "its grammar is " + std::to_string(bytes) + " bytes, more than the " +
         std::to_string(kMaxGrammarBytes) + " this server compiles";
}

} // namespace

#if TPC_HAVE_XGRAMMAR

bool structuredOutputsBuilt() { return true; }

namespace {

/// A request's matcher: the mask before each token, then the token.
class Matcher final : public TokenConstraint {
public:
  Matcher(const xgrammar::CompiledGrammar &grammar, int64_t vocab)
      : matcher(grammar), vocab(vocab) {}
  bool next(std::vector<uint32_t> &allowed) override {
    if (matcher.IsTerminated())
      return false;
    int64_t shape = xgrammar::GetBitmaskSize(int(vocab));
    allowed.resize(size_t(shape));
    DLTensor tensor{};
    tensor.data = allowed.data();
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = 1;
    tensor.dtype = DLDataType{kDLInt, 32, 1};
    tensor.shape = &shape;
    matcher.FillNextTokenBitmask(&tensor);
    for (uint32_t word : allowed)
      if (word)
        return true;
    return false;
  }
  bool accept(int64_t token) override { return matcher.AcceptToken(int32_t(token)); }

private:
  xgrammar::GrammarMatcher matcher;
  int64_t vocab;
};

xgrammar::VocabType vocabTypeOf(Tokenizer::VocabularyForm::Kind kind) {
  switch (kind) {
  case Tokenizer::VocabularyForm::ByteLevel:
    return xgrammar::VocabType::BYTE_LEVEL;
  case Tokenizer::VocabularyForm::ByteFallback:
    return xgrammar::VocabType::BYTE_FALLBACK;
  case Tokenizer::VocabularyForm::Raw:
    break;
  }
  return xgrammar::VocabType::RAW;
}

/// A JSON string literal in xgrammar's EBNF (its escapes are JSON's).
std::string ebnfString(const std::string &text) { return nlohmann::json(text).dump(); }

} // namespace

struct Grammars::Impl {
  Impl(const Tokenizer &tokenizer, int64_t vocab, std::vector<int64_t> stopIds)
      : vocab(vocab), info(vocabulary(tokenizer, vocab, stopIds)),
        compiler(info, /*max_threads=*/1, /*cache_enabled=*/true, kGrammarCacheBytes) {}

  /// Each id's token string as the tokenizer holds it; "" for ids it has none for and for
  /// special tokens (decoding them without special tokens gives nothing), which the grammar
  /// engine then never allows.
  static xgrammar::TokenizerInfo vocabulary(const Tokenizer &tokenizer, int64_t vocab,
                                            const std::vector<int64_t> &stopIds) {
    std::vector<std::string> tokens(static_cast<size_t>(vocab));
    for (int64_t id = 0; id < vocab; ++id) {
      std::optional<std::string> token = tokenizer.token(id);
      bool special = token && tokenizer.decode({id}, /*skipSpecial=*/true).empty() &&
                     !tokenizer.decode({id}, /*skipSpecial=*/false).empty();
      if (token && !special)
        tokens[size_t(id)] = *token;
    }
    std::vector<int32_t> stops;
    for (int64_t id : stopIds)
      if (id >= 0 && id < vocab)
        stops.push_back(int32_t(id));
    Tokenizer::VocabularyForm form = tokenizer.vocabularyForm();
    return xgrammar::TokenizerInfo(tokens, vocabTypeOf(form.kind), int(vocab), stops,
                                   form.prefixSpace);
  }

  int64_t vocab;
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
};

Grammars::Grammars(const Tokenizer &tokenizer, int64_t vocab, std::vector<int64_t> stopIds,
                   std::chrono::milliseconds compileLimit)
    : impl(std::make_shared<Impl>(tokenizer, vocab, std::move(stopIds))),
      compileLimit(compileLimit) {}

Grammars::~Grammars() {
  // A compile that ran over its time may still be running, and cannot be stopped: it goes on
  // alone (holding the compiler), so that a server's shutdown never waits for it.
  if (overrun.joinable()) {
    if (overrunDone->load())
      overrun.join();
    else
      overrun.detach();
  }
}

namespace {

/// The largest integer I-JSON (RFC 7493, 2.2) calls interoperable: the largest an IEEE
/// double holds exactly, and every one below it (JavaScript's Number.MAX_SAFE_INTEGER).
constexpr int64_t kLargestExactInteger = (int64_t(1) << 53) - 1;

/// Holds each integer of `schema` that has no bound on a side to I-JSON's range on that side,
/// in place: a model may otherwise write digits until max_tokens, each of them allowed
/// (SmolLM2 does, in an attendee count). Only what is typed "integer" alone is bounded (a
/// number may be any double), not an enum or a const, and never past a bound it has.
void boundIntegers(nlohmann::ordered_json &schema, int depth) {
  if (!schema.is_object() || depth > 64) // (checkSchemaKeywords refused deeper ones)
    return;
  if (schema.value("type", nlohmann::ordered_json()) == "integer" && !schema.contains("enum") &&
      !schema.contains("const")) {
    if (!schema.contains("minimum") && !schema.contains("exclusiveMinimum"))
      schema["minimum"] = -kLargestExactInteger;
    if (!schema.contains("maximum") && !schema.contains("exclusiveMaximum"))
      schema["maximum"] = kLargestExactInteger;
  }
  for (auto &[key, value] : schema.items()) {
    Subschemas held = subschemasOf(key);
    if (held == Subschemas::One)
      boundIntegers(value, depth + 1);
    else if (held != Subschemas::None && (value.is_object() || value.is_array()))
      for (auto &sub : value) // schemas by name, or a list
        boundIntegers(sub, depth + 1);
  }
}

/// Compiles `spec` with `compiler`: the grammar, or an exception with the engine's message.
xgrammar::CompiledGrammar compile(xgrammar::GrammarCompiler &compiler, const StructuredSpec &spec) {
  switch (spec.kind) {
  // JSON written compactly (", " and ": " between items, no other whitespace): a model free
  // to add whitespace may spend its max_tokens on it. json_object: an object, as OpenAI's is.
  case StructuredSpec::JsonObject:
    return compiler.CompileJSONSchema(R"({"type": "object"})", false);
  case StructuredSpec::JsonSchema: {
    nlohmann::ordered_json schema = nlohmann::ordered_json::parse(spec.text); // (in its order)
    boundIntegers(schema, 0);
    return compiler.CompileJSONSchema(schema.dump(), /*any_whitespace=*/false);
  }
  case StructuredSpec::Regex:
    return compiler.CompileRegex(spec.text);
  case StructuredSpec::Choice: {
    std::string ebnf = "root ::= ";
    for (size_t i = 0; i < spec.choices.size(); ++i)
      ebnf += (i ? " | " : "") + ebnfString(spec.choices[i]);
    return compiler.CompileGrammar(ebnf);
  }
  case StructuredSpec::Grammar:
  case StructuredSpec::None:
    break;
  }
  return compiler.CompileGrammar(spec.text);
}

/// "10 s", "0.001 s".
std::string seconds(std::chrono::milliseconds limit) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", double(limit.count()) / 1000);
  return text;
}

/// The engine's message, less the time and the source file it begins with ("[12:00:00]
/// /path/regex_converter.cc:94: "): a client learns what is wrong, not the server's paths.
std::string messageOf(const std::exception &e) {
  std::string error = e.what();
  if (size_t at = error.find(".cc:"); at != std::string::npos)
    if (size_t end = error.find(": ", at); end != std::string::npos)
      error.erase(0, end + 2);
  while (!error.empty() && std::isspace(static_cast<unsigned char>(error.back())))
    error.pop_back();
  return error;
}

} // namespace

std::vector<std::shared_ptr<TokenConstraint>>
Grammars::make(const StructuredSpec &spec, int64_t n, std::string &error, bool *busy,
               std::chrono::steady_clock::time_point queued) {
  if (busy)
    *busy = false;
  if (spec.kind == StructuredSpec::None)
    return {};
  if (std::string bad = tooLarge(spec); !bad.empty()) {
    error = bad;
    return {};
  }
  auto refuseBusy = [&](const std::string &why) {
    error = why;
    if (busy)
      *busy = true;
    return std::vector<std::shared_ptr<TokenConstraint>>();
  };
  // One compile at a time; a request that would wait long for another's is refused as busy.
  std::unique_lock<std::timed_mutex> lock(mutex, std::defer_lock);
  if (!lock.try_lock_until(queued + kCompileQueueWait))
    return refuseBusy("the grammar compiler is busy with other requests' grammars; try again");
  // The compiler cannot be stopped, and a short regex of repeated classes can take it
  // seconds: it runs on a thread of its own, and a request waits for it compileLimit at
  // most. One that runs over goes on alone, and until it ends no other grammar is compiled.
  if (overrun.joinable()) {
    if (!overrunDone->load())
      return refuseBusy("the grammar compiler is still busy with an earlier grammar that took "
                        "more than " + seconds(compileLimit) + "; try again later");
    overrun.join();
  }
  struct Result {
    std::optional<xgrammar::CompiledGrammar> grammar;
    std::string error;
  };
  auto result = std::make_shared<Result>();
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> ready = finished->get_future();
  std::thread worker([impl = impl, spec, result, done, finished] {
    try {
      result->grammar = compile(impl->compiler, spec);
    } catch (const std::exception &e) {
      result->error = messageOf(e);
    } catch (...) { // (nothing may leave a thread: it would end the server)
      result->error = "the grammar engine failed on it";
    }
    done->store(true);
    finished->set_value();
  });
  if (ready.wait_for(compileLimit) != std::future_status::ready) {
    overrun = std::move(worker);
    overrunDone = done;
    error = "compiling its grammar took more than " + seconds(compileLimit) + ": simplify it";
    return {};
  }
  worker.join();
  if (!result->grammar) {
    error = result->error;
    return {};
  }
  std::vector<std::shared_ptr<TokenConstraint>> made;
  for (int64_t i = 0; i < n; ++i)
    made.push_back(std::make_shared<Matcher>(*result->grammar, impl->vocab));
  return made;
}

#else // built without xgrammar

bool structuredOutputsBuilt() { return false; }

struct Grammars::Impl {};

Grammars::Grammars(const Tokenizer &, int64_t, std::vector<int64_t>,
                   std::chrono::milliseconds compileLimit)
    : compileLimit(compileLimit) {}

Grammars::~Grammars() = default;

std::vector<std::shared_ptr<TokenConstraint>>
Grammars::make(const StructuredSpec &spec, int64_t, std::string &error, bool *busy,
               std::chrono::steady_clock::time_point) {
  if (busy)
    *busy = false;
  if (spec.kind != StructuredSpec::None)
    error = "this tpc was built without its grammar engine (xgrammar: scripts/xgrammar.sh)";
  return {};
}

#endif

} // namespace tpcrt::serve
