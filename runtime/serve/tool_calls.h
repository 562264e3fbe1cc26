// Tool calls in a chat model's output, for the OpenAI API's `tools` and `tool_choice`: the
// formats models are taught (Hermes' <tool_call> blocks, Llama 3's bare JSON, Mistral's
// [TOOL_CALLS] list) and the two tpc constrains an output to (a JSON list under tool_choice
// "required", one function's arguments under a named tool_choice), read as vLLM's tool
// parsers read them. A response reads the whole output, a stream reads it piece by piece as
// it is decoded; both are one parser (the whole output is one piece), so a stream's deltas add
// up to exactly what the response would hold.
//
// A call's arguments are the model's own text of its arguments object, checked to be JSON,
// never re-serialized: what the client reads is what the model wrote. In every format a call
// is an object with a string "name" and an object "arguments" (or "parameters", as Llama 3 is
// taught; not both); other keys (Mistral's "id") are checked as JSON and ignored.
#ifndef TPCRT_SERVE_TOOL_CALLS_H
#define TPCRT_SERVE_TOOL_CALLS_H

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt::serve {

/// How a model writes its tool calls.
enum class ToolFormat {
  /// Text, then one or more `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks
  /// (Qwen2.5, Qwen3, Hermes, SmolLM3). Text between and after the blocks is dropped, as
  /// vLLM drops it.
  Hermes,
  /// The whole output is `{"name": …, "parameters": {…}}`, after an optional <|python_tag|>,
  /// several calls joined by ";" (Llama 3.1, 3.2 with custom tools). An output that does not
  /// start (after whitespace and the tag) with "{" is plain content.
  Llama3Json,
  /// Text, then `[TOOL_CALLS]` and a JSON list of calls (Mistral 7B v0.3).
  Mistral,
  /// The whole output is a JSON list of calls: what tpc constrains it to under tool_choice
  /// "required", whatever the model.
  JsonList,
  /// The whole output is the arguments object of the one function a named tool_choice asks
  /// for: what tpc constrains it to there.
  Named,
};

/// The format a chat template teaches its model, read from the template's text: "<tool_call>"
/// is Hermes, "[TOOL_CALLS]" Mistral, a Llama 3 template (its <|start_header_id|>) that shows
/// calls as JSON ("parameters" or <|python_tag|>) Llama3Json. nullopt where the template
/// teaches none (SmolLM2's, which renders no tools) or one tpc does not read (Llama 4's
/// default asks for Python-style calls): under tool_choice auto the answer is then content;
/// required and named constrain it to a form of tpc's own (JsonList, Named).
std::optional<ToolFormat> toolFormatOf(const std::string &chatTemplate);

/// One call as a response carries it.
struct ToolCall {
  std::string name;
  std::string arguments; // the model's JSON text of the arguments object
};

/// A whole output, split into what the client reads as the message's content and its calls.
struct ParsedOutput {
  std::string content; // the text before the calls ("" where the format has none), verbatim
  std::vector<ToolCall> calls;
  std::string error; // "" where the output was well formed, else what was wrong and where
};

/// Reads the whole `text` a model wrote in `format` (`namedFunction`: the function a Named
/// output's arguments are for). Malformed output (bad JSON, a call without a name, arguments
/// that are not an object, an unclosed <tool_call>, nesting past 64 levels) never throws: it
/// comes back as content, the whole text, with no calls and `error` saying what and at which
/// byte, as vLLM falls back to content.
ParsedOutput parseToolCalls(ToolFormat format, const std::string &text,
                            const std::string &namedFunction = "");

/// One piece of one call in a stream, as the OpenAI stream's delta.tool_calls carries it.
struct ToolCallDelta {
  int index;             // which call: 0, 1, … in the order the model wrote them
  std::string name;      // set on the call's first delta only (the name is sent whole)
  std::string arguments; // the next piece of its arguments text
};

/// What one piece of a streamed output adds to the answer.
struct StreamDelta {
  std::string content;
  std::vector<ToolCallDelta> calls; // at most one per call, in index order
  bool empty() const { return content.empty() && calls.empty(); }
};

/// Reads an output as it is decoded. Content is passed on as soon as it cannot be the start
/// of a tool-call marker (only a possible "<tool_call>" or "[TOOL_CALLS]" prefix is held
/// back); a call's name once its string is complete; its arguments piece by piece as they
/// come (held back only while the model writes them before the name). Each byte is scanned
/// once and each finished call parsed once more (by nlohmann, to check it), so a long output
/// costs linear time; what is held back is never more than the current call's text.
///
/// For every split of an output into pieces, the content deltas joined and, per call, the
/// name and the argument pieces joined are what parseToolCalls reads from the whole output
/// where it is well formed. Where it is malformed, error() says so; what was already sent
/// stays sent. Until a call's first delta has gone out nothing of the calls has been sent, so
/// the stream falls back to content as parseToolCalls does: its content is the whole text.
class ToolCallStream {
public:
  explicit ToolCallStream(ToolFormat format, std::string namedFunction = "");
  ~ToolCallStream();
  ToolCallStream(ToolCallStream &&) noexcept;
  ToolCallStream &operator=(ToolCallStream &&) noexcept;

  /// Takes the next decoded text of the output; returns what the client can be sent now.
  StreamDelta feed(const std::string &text);
  /// The output has ended: returns what was held back. After it, error() says whether the
  /// output was malformed; feed and finish return nothing more.
  StreamDelta finish();
  /// "" while the output is well formed so far, else what was wrong and at which byte.
  const std::string &error() const;

private:
  struct Parser;
  std::unique_ptr<Parser> parser;
};

} // namespace tpcrt::serve

#endif // TPCRT_SERVE_TOOL_CALLS_H
