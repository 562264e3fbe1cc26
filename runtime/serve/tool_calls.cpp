// Tool calls in a model's output (tool_calls.h): one parser that takes the output a byte at a
// time and never looks back, used whole by parseToolCalls and piece by piece by
// ToolCallStream. It follows the JSON of a call only as far as it must to know where each
// part ends (strings, escapes, nesting); whether a finished call is valid JSON is nlohmann's
// to say.
#include "tool_calls.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <utility>

namespace tpcrt::serve {

namespace {

/// How deep a value in a call may nest: deeper is refused as it comes, before nlohmann
/// parses anything, so hostile output cannot exhaust memory or the stack.
constexpr int kMaxDepth = 64;

constexpr const char *kHermesOpen = "<tool_call>";
constexpr const char *kHermesClose = "</tool_call>";
constexpr const char *kMistralMarker = "[TOOL_CALLS]";
constexpr const char *kPythonTag = "<|python_tag|>";

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// Looks for one marker in text given a byte at a time, holding back only the bytes that
/// may still be its beginning.
class MarkerWatch {
public:
  explicit MarkerWatch(std::string marker) : marker(std::move(marker)) {}

  /// Takes `c`: appends to `passed` the bytes that can no longer be part of the marker;
  /// true when the marker is complete (then nothing is held).
  bool take(char c, std::string &passed) {
    held += c;
    // The longest end of what is held that begins the marker stays held; the rest passes.
    size_t start = 0;
    while (start < held.size() &&
           marker.compare(0, held.size() - start, held, start, std::string::npos) != 0)
      ++start;
    passed.append(held, 0, start);
    held.erase(0, start);
    if (held.size() < marker.size())
      return false;
    held.clear();
    return true;
  }

  /// What is held (a beginning of the marker), no longer held.
  std::string release() { return std::exchange(held, ""); }

private:
  std::string marker, held;
};

/// Follows one JSON value a byte at a time far enough to know where it ends.
class ValueScanner {
public:
  enum Step {
    More,    // the value goes on
    Last,    // this byte ends it (a string's quote, the closing bracket)
    Before,  // it ended before this byte (a number or literal ends at a delimiter)
    TooDeep, // it nests deeper than kMaxDepth
  };

  Step step(char c) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"') {
        inString = false;
        if (depth == 0)
          return Last;
      }
      return More;
    }
    if (scalar)
      return c == ',' || c == '}' || c == ']' || isSpace(c) ? Before : More;
    switch (c) {
    case '"':
      inString = true;
      return More;
    case '{':
    case '[':
      return ++depth > kMaxDepth ? TooDeep : More;
    case '}':
    case ']':
      return --depth <= 0 ? Last : More;
    default:
      if (depth == 0) // a number or literal, outside any string or bracket
        scalar = true;
      return More;
    }
  }

private:
  int depth = 0;
  bool inString = false, escaped = false, scalar = false;
};

/// The string a JSON string literal (quotes included) stands for; nullopt where it is not
/// one (a bad escape, a raw control byte, bad UTF-8).
std::optional<std::string> decodeString(const std::string &literal) {
  try {
    return nlohmann::json::parse(literal).get<std::string>();
  } catch (const nlohmann::json::exception &) {
    return std::nullopt;
  }
}

/// "" where `text` is valid JSON, else why not (nlohmann's reason, shortened), with `at` the
/// offset in `text` where nlohmann stopped.
std::string jsonError(const std::string &text, size_t &at) {
  if (nlohmann::json::accept(text))
    return "";
  try {
    nlohmann::json value = nlohmann::json::parse(text); // throws: accept() refused it
    return "";
  } catch (const nlohmann::json::parse_error &e) {
    at = e.byte > 0 ? e.byte - 1 : 0;
    // "[json.exception.parse_error.101] parse error at line 1, column 9: <reason>": the
    // position is given separately, relative to the whole output.
    std::string reason = e.what();
    if (size_t column = reason.find("column "); column != std::string::npos)
      if (size_t colon = reason.find(": ", column); colon != std::string::npos)
        reason.erase(0, colon + 2);
    return reason.size() > 160 ? reason.substr(0, 160) + "..." : reason;
  }
}

} // namespace

struct ToolCallStream::Parser {
  /// Where in the output the next byte falls.
  enum class Phase {
    Content,        // Hermes, Mistral: text before the marker, watched for it
    LlamaStart,     // Llama3Json: whitespace before "{" or <|python_tag|>
    LlamaTag,       // Llama3Json: inside <|python_tag|>
    LlamaAfterTag,  // Llama3Json: whitespace after the tag, before "{"
    LlamaNext,      // Llama3Json: after a call: ";" or the end
    LlamaItem,      // Llama3Json: after ";": the next call's "{"
    HermesOpen,     // after <tool_call>: the call's "{"
    HermesClose,    // after a call: </tool_call>
    HermesBetween,  // after </tool_call>: text dropped, watched for the next <tool_call>
    ListOpen,       // Mistral (after the marker), JsonList: the list's "["
    ListFirst,      // after "[": a call's "{" or "]"
    ListNext,       // after a call: "," or "]"
    ListItem,       // after ",": a call's "{"
    CallObject,     // inside a call object (`field` says where)
    NamedStart,     // Named: the arguments' "{"
    NamedArguments, // Named: inside the arguments
    Trailing,       // after the calls: whitespace only
    PlainContent,   // content to the end: not a call after all, or malformed before one
    Failed,         // malformed after a call went out: the rest is ignored
    Finished,
  };
  /// Where in a call object the next byte falls.
  enum class Field { KeyOrEnd, Key, KeyText, Colon, Value, Name, Arguments, Other, AfterValue };
  /// Which of a call's values the current key names.
  enum class Member { Name, Arguments, Other };

  Parser(ToolFormat format, std::string namedFunction)
      : format(format), namedFunction(std::move(namedFunction)),
        watch(format == ToolFormat::Mistral ? kMistralMarker : kHermesOpen) {
    switch (format) {
    case ToolFormat::Hermes:
    case ToolFormat::Mistral:
      phase = Phase::Content;
      break;
    case ToolFormat::Llama3Json:
      phase = Phase::LlamaStart;
      holding = true;
      break;
    case ToolFormat::JsonList:
      phase = Phase::ListOpen;
      holding = true;
      break;
    case ToolFormat::Named:
      phase = Phase::NamedStart;
      holding = true;
      break;
    }
  }

  StreamDelta feed(const std::string &text) {
    for (char c : text) {
      bool held = holding;
      while (!step(c)) {
      }
      if (held && holding)
        unsent += c;
      ++offset;
    }
    return std::exchange(out, {});
  }

  StreamDelta finish() {
    switch (phase) {
    case Phase::Content:
      out.content += watch.release();
      break;
    case Phase::LlamaStart:
    case Phase::LlamaTag:
    case Phase::LlamaAfterTag:
      takeAsContent();
      break;
    case Phase::LlamaNext:
    case Phase::HermesBetween:
    case Phase::Trailing:
    case Phase::PlainContent:
    case Phase::Failed:
    case Phase::Finished:
      break;
    default:
      fail(endMessage());
      break;
    }
    phase = Phase::Finished;
    return std::exchange(out, {});
  }

  /// Takes `c` where the output is; false where it must be taken again in the new phase.
  bool step(char c) {
    switch (phase) {
    case Phase::Content:
      if (watch.take(c, out.content))
        startCalls();
      return true;
    case Phase::LlamaStart:
      if (isSpace(c))
        return true;
      if (c == '{')
        return beginCall();
      if (c != kPythonTag[0])
        return takeAsContent();
      phase = Phase::LlamaTag;
      matched = 1;
      return true;
    case Phase::LlamaTag:
      if (c != kPythonTag[matched])
        return takeAsContent();
      if (++matched == std::strlen(kPythonTag))
        phase = Phase::LlamaAfterTag;
      return true;
    case Phase::LlamaAfterTag:
      if (isSpace(c))
        return true;
      return c == '{' ? beginCall() : takeAsContent();
    case Phase::LlamaNext:
      return expect(c, ';', Phase::LlamaItem, "expected ';' and another call, or the end");
    case Phase::LlamaItem:
    case Phase::HermesOpen:
    case Phase::ListItem:
      if (isSpace(c))
        return true;
      return c == '{' ? beginCall() : fail("expected a call object ('{')");
    case Phase::HermesClose:
      return closeHermes(c);
    case Phase::HermesBetween: {
      std::string dropped;
      if (watch.take(c, dropped))
        phase = Phase::HermesOpen;
      return true;
    }
    case Phase::ListOpen:
      return expect(c, '[', Phase::ListFirst,
                    format == ToolFormat::Mistral ? "expected a JSON list after [TOOL_CALLS]"
                                                  : "expected a JSON list of calls");
    case Phase::ListFirst:
      if (c == ']') {
        phase = Phase::Trailing;
        return true;
      }
      if (isSpace(c))
        return true;
      return c == '{' ? beginCall() : fail("expected a call object ('{') or ']'");
    case Phase::ListNext:
      if (c == ']') {
        phase = Phase::Trailing;
        return true;
      }
      return expect(c, ',', Phase::ListItem, "expected ',' or ']' after a call");
    case Phase::CallObject:
      return stepCall(c);
    case Phase::NamedStart:
      if (isSpace(c))
        return true;
      return c == '{' ? beginNamed(c) : fail("expected the arguments object ('{')");
    case Phase::NamedArguments:
      return stepNamed(c);
    case Phase::Trailing:
      return isSpace(c) ? true : fail("text after the tool calls");
    case Phase::PlainContent:
      out.content += c;
      return true;
    case Phase::Failed:
    case Phase::Finished:
      return true;
    }
    return true;
  }

  /// Whitespace, then `want` (going on to `next`); anything else is malformed.
  bool expect(char c, char want, Phase next, const char *what) {
    if (c == want)
      phase = next;
    else if (!isSpace(c))
      return fail(what);
    return true;
  }

  /// Hermes, Mistral: the marker is complete; what follows is calls.
  void startCalls() {
    holding = true;
    unsent = format == ToolFormat::Mistral ? kMistralMarker : kHermesOpen;
    phase = format == ToolFormat::Mistral ? Phase::ListOpen : Phase::HermesOpen;
  }

  bool closeHermes(char c) {
    if (matched == 0 && isSpace(c))
      return true;
    if (c != kHermesClose[matched])
      return fail("expected </tool_call> after call " + std::to_string(index - 1));
    if (++matched == std::strlen(kHermesClose)) {
      phase = Phase::HermesBetween;
      watch = MarkerWatch(kHermesOpen);
    }
    return true;
  }

  // A call object.

  bool beginCall() {
    phase = Phase::CallObject;
    field = Field::KeyOrEnd;
    callText = "{";
    callStart = offset;
    nameSeen = argumentsSeen = nameSent = false;
    heldArguments.clear();
    return true;
  }

  bool stepCall(char c) {
    callText += c;
    switch (field) {
    case Field::KeyOrEnd:
    case Field::Key:
      if (isSpace(c))
        return true;
      if (c == '"') {
        startString(Field::KeyText);
        return true;
      }
      if (c == '}' && field == Field::KeyOrEnd)
        return endCall();
      return failInCall("expected a key");
    case Field::KeyText:
      literal += c;
      return stringEnds(c) ? takeKey() : true;
    case Field::Colon:
      if (c == ':')
        field = Field::Value;
      else if (!isSpace(c))
        return failInCall("expected ':' after a key");
      return true;
    case Field::Value:
      return beginValue(c);
    case Field::Name:
      literal += c;
      return stringEnds(c) ? takeName() : true;
    case Field::Arguments: {
      ValueScanner::Step s = value.step(c);
      if (s == ValueScanner::TooDeep)
        return failInCall("its arguments nest deeper than " + std::to_string(kMaxDepth) +
                          " levels");
      sendArguments(c);
      if (s == ValueScanner::Last)
        field = Field::AfterValue;
      return true;
    }
    case Field::Other:
      switch (value.step(c)) {
      case ValueScanner::TooDeep:
        return failInCall("a value nests deeper than " + std::to_string(kMaxDepth) + " levels");
      case ValueScanner::Before: // the number or literal ended: `c` follows it
        callText.pop_back();
        field = Field::AfterValue;
        return stepCall(c);
      case ValueScanner::Last:
        field = Field::AfterValue;
        return true;
      case ValueScanner::More:
        return true;
      }
      return true;
    case Field::AfterValue:
      if (c == ',')
        field = Field::Key;
      else if (c == '}')
        return endCall();
      else if (!isSpace(c))
        return failInCall("expected ',' or '}' after a value");
      return true;
    }
    return true;
  }

  void startString(Field next) {
    field = next;
    literal = "\"";
    escaped = false;
  }

  /// Whether `c`, inside a string literal, is its closing quote.
  bool stringEnds(char c) {
    if (escaped)
      escaped = false;
    else if (c == '\\')
      escaped = true;
    else
      return c == '"';
    return false;
  }

  bool takeKey() {
    std::optional<std::string> key = decodeString(literal);
    if (!key)
      return failInCall("a key is not a valid JSON string");
    if (*key == "name") {
      if (nameSeen)
        return failInCall("it names its function twice");
      member = Member::Name;
    } else if (*key == "arguments" || *key == "parameters") {
      if (argumentsSeen)
        return failInCall("it has arguments twice");
      member = Member::Arguments;
    } else {
      member = Member::Other;
    }
    field = Field::Colon;
    return true;
  }

  bool beginValue(char c) {
    if (isSpace(c))
      return true;
    if (c == ',' || c == '}' || c == ']' || c == ':')
      return failInCall("a value is missing");
    switch (member) {
    case Member::Name:
      if (c != '"')
        return failInCall("its name must be a string");
      nameSeen = true;
      startString(Field::Name);
      return true;
    case Member::Arguments:
      if (c != '{')
        return failInCall("its arguments must be a JSON object");
      argumentsSeen = true;
      value = ValueScanner();
      value.step(c);
      sendArguments(c);
      field = Field::Arguments;
      return true;
    case Member::Other:
      value = ValueScanner();
      value.step(c); // the first byte never ends a value nor nests too deep
      field = Field::Other;
      return true;
    }
    return true;
  }

  bool takeName() {
    std::optional<std::string> name = decodeString(literal);
    if (!name)
      return failInCall("its name is not a valid JSON string");
    if (name->empty())
      return failInCall("a call without a name");
    sendName(*name);
    field = Field::AfterValue;
    return true;
  }

  /// The call's closing "}": it must have had a name and arguments, and be valid JSON.
  bool endCall() {
    if (!nameSeen)
      return failInCall("a call without a name");
    if (!argumentsSeen)
      return failInCall("a call without arguments");
    size_t at = 0;
    if (std::string why = jsonError(callText, at); !why.empty())
      return fail("call " + std::to_string(index) + " is not valid JSON: " + why, callStart + at);
    ++index;
    callText.clear();
    matched = 0;
    phase = format == ToolFormat::Hermes       ? Phase::HermesClose
            : format == ToolFormat::Llama3Json ? Phase::LlamaNext
                                               : Phase::ListNext;
    return true;
  }

  // Named: the whole output is the arguments of call 0, whose name is known from the start.

  bool beginNamed(char c) {
    callText = "{";
    callStart = offset;
    value = ValueScanner();
    value.step(c);
    sendName(namedFunction);
    sendArguments(c);
    phase = Phase::NamedArguments;
    return true;
  }

  bool stepNamed(char c) {
    callText += c;
    ValueScanner::Step s = value.step(c);
    if (s == ValueScanner::TooDeep)
      return fail("the arguments nest deeper than " + std::to_string(kMaxDepth) + " levels");
    sendArguments(c);
    if (s != ValueScanner::Last)
      return true;
    size_t at = 0;
    if (std::string why = jsonError(callText, at); !why.empty())
      return fail("the arguments are not valid JSON: " + why, callStart + at);
    callText.clear();
    phase = Phase::Trailing;
    return true;
  }

  // What goes out.

  /// The current call's first delta: its name, and the arguments the model wrote before it.
  void sendName(const std::string &name) {
    out.calls.push_back({index, name, std::move(heldArguments)});
    heldArguments.clear();
    nameSent = true;
    stopHolding(); // a call has gone out: there is no going back to content
  }

  void sendArguments(char c) {
    if (!nameSent)
      heldArguments += c;
    else if (!out.calls.empty() && out.calls.back().index == index)
      out.calls.back().arguments += c;
    else
      out.calls.push_back({index, "", std::string(1, c)});
  }

  void stopHolding() {
    holding = false;
    std::string().swap(unsent);
  }

  /// Not a call after all (Llama3Json): what was held and the rest are content.
  bool takeAsContent() {
    out.content += unsent;
    stopHolding();
    phase = Phase::PlainContent;
    return false;
  }

  /// The output is malformed at byte `at`. Before any call went out it is content, all of
  /// it, as parseToolCalls reads it; after, the rest is ignored.
  bool fail(const std::string &what, size_t at) {
    error = what + " (at byte " + std::to_string(at) + ")";
    if (holding)
      return takeAsContent();
    phase = Phase::Failed;
    return false;
  }
  bool fail(const std::string &what) { return fail(what, offset); }
  bool failInCall(const std::string &what) {
    return fail("call " + std::to_string(index) + ": " + what);
  }

  std::string endMessage() const {
    switch (phase) {
    case Phase::HermesOpen:
    case Phase::HermesClose:
      return "unclosed <tool_call>: the output ends inside it";
    case Phase::CallObject:
      return format == ToolFormat::Hermes ? "unclosed <tool_call>: the output ends inside call " +
                                                std::to_string(index)
                                          : "the output ends inside call " + std::to_string(index);
    case Phase::LlamaItem:
      return "the output ends after ';', before another call";
    case Phase::ListOpen:
      return format == ToolFormat::Mistral ? "the output ends after [TOOL_CALLS], before its list"
                                           : "the output has no JSON list of calls";
    case Phase::NamedStart:
      return "the output has no arguments object";
    case Phase::NamedArguments:
      return "the output ends inside the arguments object";
    default:
      return "the output ends inside the list of calls";
    }
  }

  ToolFormat format;
  std::string namedFunction;
  Phase phase = Phase::Content;
  MarkerWatch watch;
  size_t offset = 0; // bytes taken so far: where errors point
  std::string error;
  StreamDelta out; // what the current feed or finish sends

  // Until a call's first delta goes out, the bytes taken since content stopped (all of them,
  // where the format has no content before its calls): content if the output turns out not
  // to hold calls.
  bool holding = false;
  std::string unsent;

  // The current call.
  int index = 0;
  Field field = Field::KeyOrEnd;
  Member member = Member::Other;
  std::string callText; // its text so far, checked by nlohmann when it ends
  size_t callStart = 0;
  std::string literal; // the key or name string being read, quotes included
  bool escaped = false;
  bool nameSeen = false, argumentsSeen = false, nameSent = false;
  std::string heldArguments; // arguments written before the name
  ValueScanner value;
  size_t matched = 0; // bytes matched of <|python_tag|> or </tool_call>
};

std::optional<ToolFormat> toolFormatOf(const std::string &chatTemplate) {
  auto has = [&](const char *text) { return chatTemplate.find(text) != std::string::npos; };
  if (has(kHermesOpen))
    return ToolFormat::Hermes;
  if (has(kMistralMarker))
    return ToolFormat::Mistral;
  if (has("<|start_header_id|>") && (has("\"parameters\"") || has(kPythonTag)))
    return ToolFormat::Llama3Json;
  return std::nullopt;
}

ParsedOutput parseToolCalls(ToolFormat format, const std::string &text,
                            const std::string &namedFunction) {
  ToolCallStream stream(format, namedFunction);
  ParsedOutput parsed;
  for (const StreamDelta &delta : {stream.feed(text), stream.finish()}) {
    parsed.content += delta.content;
    for (const ToolCallDelta &call : delta.calls) {
      if (size_t(call.index) == parsed.calls.size())
        parsed.calls.push_back({call.name, call.arguments});
      else
        parsed.calls[size_t(call.index)].arguments += call.arguments;
    }
  }
  if (!stream.error().empty())
    return {text, {}, stream.error()};
  return parsed;
}

ToolCallStream::ToolCallStream(ToolFormat format, std::string namedFunction)
    : parser(std::make_unique<Parser>(format, std::move(namedFunction))) {}
ToolCallStream::~ToolCallStream() = default;
ToolCallStream::ToolCallStream(ToolCallStream &&) noexcept = default;
ToolCallStream &ToolCallStream::operator=(ToolCallStream &&) noexcept = default;

StreamDelta ToolCallStream::feed(const std::string &text) { return parser->feed(text); }
StreamDelta ToolCallStream::finish() { return parser->finish(); }
const std::string &ToolCallStream::error() const { return parser->error; }

} // namespace tpcrt::serve
