// Structured outputs: a request's response_format (json_object, json_schema) or vLLM's
// structured_outputs (json, regex, choice, grammar), compiled into a grammar whose matcher
// constrains each token the request generates (engine's TokenConstraint). The grammar engine
// is xgrammar's C++ core, built from its pinned sdist (scripts/xgrammar.sh); a build without
// it refuses these fields, saying so. The vocabulary it matches against is tpc's own
// tokenizer's: each id's token string and how those strings spell bytes
// (Tokenizer::vocabularyForm), special tokens never allowed, the model's stop ids only where
// the grammar is complete.
#ifndef TPCRT_SERVE_STRUCTURED_H
#define TPCRT_SERVE_STRUCTURED_H

#include "../engine/request.h"
#include "tpcrt/tokenizer.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt::serve {

/// What a request asks its output to be.
struct StructuredSpec {
  enum Kind { None, JsonObject, JsonSchema, Regex, Choice, Grammar } kind = None;
  std::string text;                 // the schema (as JSON), the regex or the EBNF grammar
  std::vector<std::string> choices; // Choice
  std::string field;                // the request's field that asked (for its errors)
};

/// How a schema keyword's value holds schemas, for the keywords checkSchemaKeywords lets
/// through: by name (properties, $defs, definitions), as a list (anyOf), one (items,
/// additionalProperties), or none. The one list every walk of a schema reads.
enum class Subschemas { None, ByName, List, One };
Subschemas subschemasOf(const std::string &keyword);

/// The JSON schema keywords a schema may use (others are refused, naming the keyword).
/// "" where `schema` uses only them, else what is wrong and where ("#/properties/x").
std::string checkSchemaKeywords(const nlohmann::ordered_json &schema);

/// Whether this build has the grammar engine.
bool structuredOutputsBuilt();

/// The most bytes of a grammar's text (a schema's JSON, a regex, an EBNF grammar, the choices
/// together) a server compiles. The compiler cannot be stopped once it runs, so its time and
/// memory are bounded through its input: at this size the costliest kinds measured (a 6,000
/// string enum, 20,000 alternatives of a regex) compile within about 2 s and 70 MB on one core.
constexpr size_t kMaxGrammarBytes = 64 << 10;
/// The most bytes of compiled grammars the compiler's cache keeps (least recently used go
/// first): a distinct large schema in every request would otherwise grow it without end.
constexpr int64_t kGrammarCacheBytes = int64_t(256) << 20;
/// The longest a request waits for its grammar to compile; one that takes longer is refused,
/// and the compile, which cannot be stopped, finishes alone before any other starts.
constexpr std::chrono::milliseconds kCompileLimit{10'000};
/// The longest a request waits, from the time it was queued, for another's compile to end
/// before its own starts: past it, the compiler is busy (a 503 to retry), never a queue that
/// grows behind a slow grammar.
constexpr std::chrono::milliseconds kCompileQueueWait{1'000};

/// One server's grammars: the vocabulary as the grammar engine reads it, and a compiler (with
/// its cache of compiled grammars, kGrammarCacheBytes at most). Compiling may take a while:
/// the server calls it on threads of its own (neither the engine's nor the readers'); one
/// compile at a time.
class Grammars {
public:
  /// Over `tokenizer`'s vocabulary of `vocab` ids (the model's: ids past the tokenizer's are
  /// never allowed), ending where the grammar allows one of `stopIds`.
  Grammars(const Tokenizer &tokenizer, int64_t vocab, std::vector<int64_t> stopIds,
           std::chrono::milliseconds compileLimit = kCompileLimit);
  ~Grammars();
  /// `n` constraints (one a choice, each its own state) for `spec`, compiled once; none with
  /// `error` (the grammar engine's message, for a 400) where it cannot be compiled, its text
  /// is over kMaxGrammarBytes, it took over `compileLimit` (given to the constructor), or one
  /// that did is still compiling.
  /// `busy` (where given) says whether the error is the compiler's being busy with another
  /// request's grammar (kCompileQueueWait passed since `queued`, or an overrun still
  /// compiling): no fault of this request's, which may be sent again. A request queued longer
  /// ago than kCompileQueueWait starts only where the compiler is free at once.
  std::vector<std::shared_ptr<TokenConstraint>>
  make(const StructuredSpec &spec, int64_t n, std::string &error, bool *busy = nullptr,
       std::chrono::steady_clock::time_point queued = std::chrono::steady_clock::now());

private:
  struct Impl;
  std::shared_ptr<Impl> impl; // (shared with a compile that ran over, which may outlive this)
  std::chrono::milliseconds compileLimit;
  std::timed_mutex mutex;
  std::thread overrun; // a compile that ran over compileLimit, until it ends
  std::shared_ptr<std::atomic<bool>> overrunDone;
};

} // namespace tpcrt::serve

#endif // TPCRT_SERVE_STRUCTURED_H
