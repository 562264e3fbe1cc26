// Tool calls in a model's output (runtime/serve/tool_calls.h). Each format's well-formed
// outputs (no call, one, two; content before them; unicode, escaped quotes and brackets inside
// strings; nested arguments) are read whole and streamed whole, a byte at a time and cut in two
// at every byte, and must give the content and calls written out here by hand, the stream's
// deltas adding up to what parseToolCalls reads. Malformed outputs (truncated, unclosed, a
// name that is not a string, arguments that are not an object, garbage, nesting past 64, a
// megabyte) must give an error, the same however they are cut, and come back as content.
// toolFormatOf must tell each conformance chat template's format.
#include "tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <utility>

namespace tpcrt::serve {
namespace {

using Calls = std::vector<std::pair<std::string, std::string>>; // name, arguments

Calls callsOf(const std::vector<ToolCall> &calls) {
  Calls pairs;
  for (const ToolCall &call : calls)
    pairs.emplace_back(call.name, call.arguments);
  return pairs;
}

/// What a stream's deltas add up to.
struct Streamed {
  std::string content;
  Calls calls;
  std::string error;
};

/// Feeds `pieces` in order and finishes, checking the deltas' shape on the way: one delta per
/// call and feed, calls in order, a call's first delta names it and the later ones do not.
Streamed stream(ToolFormat format, const std::vector<std::string> &pieces,
                const std::string &named = "get_weather") {
  ToolCallStream parser(format, named);
  Streamed streamed;
  auto take = [&](const StreamDelta &delta) {
    streamed.content += delta.content;
    int previous = -1;
    for (const ToolCallDelta &call : delta.calls) {
      EXPECT_GT(call.index, previous) << "one delta per call, in order";
      previous = call.index;
      if (size_t(call.index) == streamed.calls.size()) {
        EXPECT_NE(call.name, "") << "a call's first delta names it";
        streamed.calls.emplace_back(call.name, call.arguments);
        continue;
      }
      ASSERT_EQ(size_t(call.index) + 1, streamed.calls.size()) << "only the latest call grows";
      EXPECT_EQ(call.name, "") << "a call is named once";
      streamed.calls.back().second += call.arguments;
    }
  };
  for (const std::string &piece : pieces)
    take(parser.feed(piece));
  take(parser.finish());
  streamed.error = parser.error();
  return streamed;
}

/// The ways an output is cut: whole, a byte at a time, and in two at every byte (where it is
/// short enough for that).
std::vector<std::vector<std::string>> cuts(const std::string &text) {
  std::vector<std::vector<std::string>> all = {{text}, {}};
  for (char c : text)
    all[1].emplace_back(1, c);
  if (text.size() <= 2000)
    for (size_t at = 0; at <= text.size(); ++at)
      all.push_back({text.substr(0, at), text.substr(at)});
  return all;
}

std::string describe(const std::vector<std::string> &pieces) {
  if (pieces.size() == 1)
    return "whole";
  if (pieces.size() == 2)
    return "cut at byte " + std::to_string(pieces[0].size());
  return "a byte at a time";
}

/// `text`, written in `format`, is well formed and holds `content` and `calls`: read whole
/// and streamed however cut.
void expectCalls(ToolFormat format, const std::string &text, const std::string &content,
                 const Calls &calls, const std::string &named = "get_weather") {
  SCOPED_TRACE(text);
  ParsedOutput parsed = parseToolCalls(format, text, named);
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.content, content);
  EXPECT_EQ(callsOf(parsed.calls), calls);
  for (const std::vector<std::string> &pieces : cuts(text)) {
    Streamed streamed = stream(format, pieces, named);
    EXPECT_EQ(streamed.error, "") << describe(pieces);
    EXPECT_EQ(streamed.content, parsed.content) << describe(pieces);
    EXPECT_EQ(streamed.calls, callsOf(parsed.calls)) << describe(pieces);
  }
}

/// `text`, written in `format`, is malformed: an error that says `why`, the whole text as
/// content and no calls; streamed however cut, the same error, and the whole text as content
/// where no call went out before it was found.
void expectError(ToolFormat format, const std::string &text, const std::string &why) {
  SCOPED_TRACE(text.size() > 300 ? text.substr(0, 300) + "..." : text);
  ParsedOutput parsed = parseToolCalls(format, text, "get_weather");
  EXPECT_NE(parsed.error.find(why), std::string::npos) << parsed.error;
  EXPECT_EQ(parsed.content, text);
  EXPECT_TRUE(parsed.calls.empty());
  for (const std::vector<std::string> &pieces : cuts(text)) {
    Streamed streamed = stream(format, pieces);
    EXPECT_EQ(streamed.error, parsed.error) << describe(pieces);
    if (streamed.calls.empty()) {
      EXPECT_EQ(streamed.content, text) << describe(pieces);
    }
  }
}

/// `{"a": ` `levels` times, 1, then as many `}`: arguments that nest `levels` deep.
std::string nested(int levels) {
  std::string text;
  for (int i = 0; i < levels; ++i)
    text += "{\"a\": ";
  return text + "1" + std::string(size_t(levels), '}');
}

TEST(ToolCalls, Hermes) {
  std::string text = R"~(Hello! 1 < 2, and <tool_cal is no tag; </tool_call> neither.)~";
  expectCalls(ToolFormat::Hermes, text, text, {});

  expectCalls(ToolFormat::Hermes, R"~(<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
</tool_call>)~",
              "", {{"get_weather", R"~({"city": "Paris", "unit": "celsius"})~"}});

  // Content before the calls; a closing tag, quotes and brackets inside a string; unicode
  // raw and escaped; arguments before the name; an escaped name; a key that is neither.
  expectCalls(ToolFormat::Hermes, R"~(Let me look that up — twice.
<tool_call>
{"name": "search", "arguments": {"q": "café \"quoted\" {not} [json] </tool_call>", "emoji": "😀", "esc": "\u00e9\\n"}}
</tool_call>
<tool_call>{"arguments": {"a": [1, {"b": [true, null, -2.5e3]}], "c": {"d": {}}}, "name": "nest\u0065d", "id": 7}</tool_call>
)~",
              "Let me look that up — twice.\n",
              {{"search", R"~({"q": "café \"quoted\" {not} [json] </tool_call>", "emoji": "😀", "esc": "\u00e9\\n"})~"},
               {"nested", R"~({"a": [1, {"b": [true, null, -2.5e3]}], "c": {"d": {}}})~"}});

  // Text between and after the blocks is dropped, as vLLM drops it.
  expectCalls(ToolFormat::Hermes,
              R"~(<tool_call>{"name": "a", "arguments": {}}</tool_call> and then <tool_call>  {"name": "b", "arguments": {"x": "y"}}  </tool_call> bye)~",
              "", {{"a", "{}"}, {"b", R"~({"x": "y"})~"}});
}

TEST(ToolCalls, Llama3Json) {
  std::string text = "The answer is {42}; no call here.";
  expectCalls(ToolFormat::Llama3Json, text, text, {});
  // A built-in tool's Python call is not a custom tool's JSON: content.
  text = "  \n<|python_tag|>brave_search.call(query=\"x\")";
  expectCalls(ToolFormat::Llama3Json, text, text, {});
  text = "<|python_is not the tag";
  expectCalls(ToolFormat::Llama3Json, text, text, {});

  expectCalls(ToolFormat::Llama3Json,
              R"~(<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}})~", "",
              {{"get_weather", R"~({"city": "Paris"})~"}});

  // Two calls joined by ";" (one inside a string too), "arguments" for "parameters".
  expectCalls(ToolFormat::Llama3Json,
              R"~( {"name": "first", "parameters": {"s": "x; y \\ \"z\" }"}}; {"name": "second", "arguments": {"n": [1, [2, [3]]], "u": "\u00e9ü", "o": {"k": {"k": {}}}}}
)~",
              "",
              {{"first", R"~({"s": "x; y \\ \"z\" }"})~"},
               {"second", R"~({"n": [1, [2, [3]]], "u": "\u00e9ü", "o": {"k": {"k": {}}}})~"}});
}

TEST(ToolCalls, Mistral) {
  std::string text = "No tools [TOOL] [TOOL_CALL] [link](x) here.";
  expectCalls(ToolFormat::Mistral, text, text, {});

  expectCalls(ToolFormat::Mistral, R"~([TOOL_CALLS] [{"name": "f", "arguments": {}}])~", "",
              {{"f", "{}"}});

  expectCalls(ToolFormat::Mistral,
              R"~(Sure. [TOOL_CALLS][{"name": "lookup", "arguments": {"x": "]}\"[TOOL_CALLS]"}, "id": "abc123def"}, {"name": "deep", "arguments": {"y": {"z": ["ä", "\"", {"w": []}]}}}])~",
              "Sure. ",
              {{"lookup", R"~({"x": "]}\"[TOOL_CALLS]"})~"},
               {"deep", R"~({"y": {"z": ["ä", "\"", {"w": []}]}})~"}});

  expectCalls(ToolFormat::Mistral, "Nothing to call.[TOOL_CALLS] [] \n", "Nothing to call.", {});
}

TEST(ToolCalls, JsonList) {
  expectCalls(ToolFormat::JsonList, "[]", "", {});
  expectCalls(ToolFormat::JsonList, " [ ]\n", "", {});

  expectCalls(ToolFormat::JsonList, R"~([{"name": "f", "parameters": {"a": 1}}])~", "",
              {{"f", R"~({"a": 1})~"}});

  expectCalls(ToolFormat::JsonList,
              R"~(
[{"name": "f", "parameters": {"s": "{[\"]}"}}, {"name": "g", "parameters": {"deep": {"x": [{"y": "日本"}]}}}]
)~",
              "",
              {{"f", R"~({"s": "{[\"]}"})~"}, {"g", R"~({"deep": {"x": [{"y": "日本"}]}})~"}});
}

TEST(ToolCalls, Named) {
  // The whole output is one call's arguments; whitespace around them is not.
  expectCalls(ToolFormat::Named, "{}", "", {{"get_weather", "{}"}});
  expectCalls(ToolFormat::Named, R"~({"city": "Paris"})~", "",
              {{"get_weather", R"~({"city": "Paris"})~"}});
  expectCalls(ToolFormat::Named, " \n{\"s\": \"}\\\"{\", \"n\": {\"m\": [1, 2, {\"k\": \"é😀\"}]}} \n",
              "", {{"get_weather", R"~({"s": "}\"{", "n": {"m": [1, 2, {"k": "é😀"}]}})~"}});
}

TEST(ToolCalls, NestingUpTo64) {
  std::string arguments = nested(64);
  expectCalls(ToolFormat::JsonList, "[{\"name\": \"f\", \"parameters\": " + arguments + "}]", "",
              {{"f", arguments}});
  expectCalls(ToolFormat::Named, arguments, "", {{"get_weather", arguments}});
}

TEST(ToolCalls, Malformed) {
  const ToolFormat H = ToolFormat::Hermes;
  expectError(H, R"~(<tool_call>{"name": "f", "arguments": {"a": 1)~", "unclosed <tool_call>");
  expectError(H, R"~(Hi <tool_call>{"name": "f", "arguments": {}})~", "unclosed <tool_call>");
  expectError(H, "Hi <tool_call>", "unclosed <tool_call>");
  expectError(H, R"~(<tool_call>{"name": "f", "arguments": {}} junk</tool_call>)~",
              "expected </tool_call>");
  expectError(H, R"~(<tool_call>{"name": 3, "arguments": {}}</tool_call>)~",
              "its name must be a string");
  expectError(H, R"~(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)~",
              "its arguments must be a JSON object");
  expectError(H, R"~(<tool_call>{"arguments": {}}</tool_call>)~", "a call without a name");
  expectError(H, R"~(<tool_call>{"name": "", "arguments": {}}</tool_call>)~",
              "a call without a name");
  expectError(H, R"~(<tool_call>{"name": "f"}</tool_call>)~", "a call without arguments");
  expectError(H, R"~(<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call>)~",
              "is not valid JSON");
  expectError(H, R"~(<tool_call>{"name": "f", "arguments": {"a": 1,}}</tool_call>)~",
              "is not valid JSON");
  expectError(H, "<tool_call>{\"name\": \"f\\q\", \"arguments\": {}}</tool_call>",
              "not a valid JSON string");
  expectError(H, "<tool_call>not json</tool_call>", "expected a call object");
  expectError(H, R"~(<tool_call>{"name": "f", "name": "g", "arguments": {}}</tool_call>)~",
              "names its function twice");
  expectError(H, R"~(<tool_call>{"name": "f", "arguments": {}, "parameters": {}}</tool_call>)~",
              "has arguments twice");
  // The first call went out before the second turned out malformed.
  std::string text = R"~(<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "arguments": [1]}</tool_call>)~";
  expectError(H, text, "call 1: its arguments must be a JSON object");
  for (const std::vector<std::string> &pieces : cuts(text)) {
    Streamed streamed = stream(H, pieces);
    EXPECT_EQ(streamed.content, "") << describe(pieces); // what went out stays as it was
    EXPECT_EQ(streamed.calls, (Calls{{"f", "{}"}, {"g", ""}})) << describe(pieces);
  }

  const ToolFormat L = ToolFormat::Llama3Json;
  expectError(L, R"~({"name": 3})~", "its name must be a string");
  expectError(L, R"~({"answer": 42})~", "a call without a name");
  expectError(L, R"~({"name": "f", "parameters": "x"})~", "its arguments must be a JSON object");
  expectError(L, R"~({"name": "f", "parameters": {"a": 1}} and more)~", "expected ';'");
  expectError(L, R"~(<|python_tag|>{"name": "f", "parameters": {"a": )~",
              "the output ends inside call 0");
  expectError(L, R"~({"name": "f", "parameters": {}};)~", "after ';', before another call");
  expectError(L, R"~({"name": "f", "parameters": {"a": 01}})~", "is not valid JSON");
  expectError(L, R"~({"name": "f" "parameters": {}})~", "expected ',' or '}'");
  expectError(L, R"~({"name": "f", "parameters": {}, "x": })~", "a value is missing");

  const ToolFormat M = ToolFormat::Mistral;
  expectError(M, "[TOOL_CALLS] garbage", "expected a JSON list after [TOOL_CALLS]");
  expectError(M, R"~(Text [TOOL_CALLS][{"name": "f", "arguments": {}}] garbage)~",
              "text after the tool calls");
  expectError(M, "Text [TOOL_CALLS]", "ends after [TOOL_CALLS]");
  expectError(M, R"~([TOOL_CALLS][{"name": "f", "arguments": {}})~",
              "ends inside the list of calls");
  expectError(M, "[TOOL_CALLS][1]", "expected a call object");
  expectError(M, R"~([TOOL_CALLS][{"name": "f", "arguments": {}} {"name": "g", "arguments": {}}])~",
              "expected ',' or ']'");

  const ToolFormat J = ToolFormat::JsonList;
  expectError(J, "", "no JSON list of calls");
  expectError(J, "hello", "expected a JSON list of calls");
  expectError(J, R"~({"name": "f", "parameters": {}})~", "expected a JSON list of calls");
  expectError(J, R"~([{"name": "f", "parameters": []}])~", "its arguments must be a JSON object");
  expectError(J, R"~([{"name": "f", "parameters": {}},])~", "expected a call object");

  const ToolFormat N = ToolFormat::Named;
  expectError(N, "", "no arguments object");
  expectError(N, "[1]", "expected the arguments object");
  expectError(N, R"~("just a string")~", "expected the arguments object");
  expectError(N, R"~({"a": 1)~", "ends inside the arguments object");
  expectError(N, R"~({"a": 1} x)~", "text after the tool calls");
  expectError(N, R"~({"a": })~", "not valid JSON");
}

TEST(ToolCalls, TooDeep) {
  std::string arguments = nested(100);
  const std::string why = "deeper than 64 levels";
  expectError(ToolFormat::Hermes,
              "<tool_call>{\"name\": \"f\", \"arguments\": " + arguments + "}</tool_call>", why);
  expectError(ToolFormat::Llama3Json, "{\"name\": \"f\", \"parameters\": " + arguments + "}", why);
  expectError(ToolFormat::Mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": " + arguments + "}]",
              why);
  expectError(ToolFormat::JsonList, "[{\"name\": \"f\", \"parameters\": " + arguments + "}]", why);
  expectError(ToolFormat::Named, arguments, why);
  expectError(ToolFormat::JsonList, nested(65), "expected a JSON list of calls");
  // Deep in a value that is not the arguments, before the name.
  expectError(ToolFormat::JsonList, "[{\"x\": " + std::string(100, '[') + "], \"name\": \"f\"}]",
              why);
  EXPECT_NE(parseToolCalls(ToolFormat::Named, nested(65)).error.find(why), std::string::npos);
}

TEST(ToolCalls, Megabyte) {
  const size_t kMegabyte = size_t(1) << 20;
  // Malformed: an argument string that never ends, a megabyte of brackets, of garbage.
  expectError(ToolFormat::Hermes,
              "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"" + std::string(kMegabyte, 'x'),
              "unclosed <tool_call>");
  expectError(ToolFormat::Named, std::string(kMegabyte, '{'), "deeper than 64 levels");
  expectError(ToolFormat::JsonList, "[{\"name\": \"f\", \"parameters\": " +
                                        std::string(kMegabyte, '['),
              "its arguments must be a JSON object");
  expectError(ToolFormat::Mistral, "[TOOL_CALLS]" + std::string(kMegabyte, '?'),
              "expected a JSON list after [TOOL_CALLS]");

  // Well formed: a megabyte of arguments, and of content that streams as it comes.
  std::string value(kMegabyte, 'y');
  std::string arguments = "{\"s\": \"" + value + "\"}";
  ParsedOutput parsed = parseToolCalls(
      ToolFormat::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": " + arguments + "}</tool_call>");
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(callsOf(parsed.calls), (Calls{{"f", arguments}}));

  ToolCallStream content(ToolFormat::Hermes);
  std::string piece = "lorem ipsum dolor sit amet ";
  for (size_t sent = 0; sent < kMegabyte; sent += piece.size())
    ASSERT_EQ(content.feed(piece).content, piece) << "held back at byte " << sent;
  EXPECT_TRUE(content.finish().empty());
}

// The stream sends what it can as soon as it can.
TEST(ToolCallStream, SendsAtOnce) {
  ToolCallStream hermes(ToolFormat::Hermes);
  EXPECT_EQ(hermes.feed("Hi <").content, "Hi ");
  EXPECT_EQ(hermes.feed("b").content, "<b");
  EXPECT_EQ(hermes.feed(" <tool_").content, " ");
  EXPECT_TRUE(hermes.feed("call>").empty());
  StreamDelta delta = hermes.feed("\n{\"name\": \"f\"");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].index, 0);
  EXPECT_EQ(delta.calls[0].name, "f");
  EXPECT_EQ(delta.calls[0].arguments, "");
  delta = hermes.feed(", \"arguments\": {\"x\": \"a");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].name, "");
  EXPECT_EQ(delta.calls[0].arguments, "{\"x\": \"a");
  delta = hermes.feed("b\"}}\n</tool_call>");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].arguments, "b\"}");
  EXPECT_TRUE(hermes.finish().empty());
  EXPECT_EQ(hermes.error(), "");

  ToolCallStream mistral(ToolFormat::Mistral);
  EXPECT_EQ(mistral.feed("Sure [").content, "Sure ");
  EXPECT_TRUE(mistral.feed("TOOL").empty());
  delta = mistral.feed("_CALLS][{\"name\": \"g\", \"arguments\": {\"k\"");
  EXPECT_EQ(delta.content, "");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].name, "g");
  EXPECT_EQ(delta.calls[0].arguments, "{\"k\"");

  ToolCallStream named(ToolFormat::Named, "get_weather");
  EXPECT_TRUE(named.feed(" ").empty());
  delta = named.feed("{\"a\"");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].name, "get_weather");
  EXPECT_EQ(delta.calls[0].arguments, "{\"a\"");
  delta = named.feed(": 1} ");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].arguments, ": 1}");
  EXPECT_TRUE(named.finish().empty());
  EXPECT_EQ(named.error(), "");
}

TEST(ToolCallStream, Llama3HoldsOnlyTheStart) {
  ToolCallStream call(ToolFormat::Llama3Json);
  EXPECT_TRUE(call.feed("  ").empty());
  EXPECT_TRUE(call.feed("<|python_").empty());
  StreamDelta delta = call.feed("tag|>{\"name\": \"f\", \"parameters\": {");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].name, "f");
  EXPECT_EQ(delta.calls[0].arguments, "{");

  ToolCallStream content(ToolFormat::Llama3Json);
  EXPECT_TRUE(content.feed(" <|py").empty());
  EXPECT_TRUE(content.feed("thon").empty());
  EXPECT_EQ(content.feed("!").content, " <|python!");
  EXPECT_EQ(content.feed(" {\"name\"").content, " {\"name\"");
  EXPECT_TRUE(content.finish().empty());
  EXPECT_EQ(content.error(), "");
}

TEST(ToolCallStream, HoldsArgumentsUntilTheName) {
  ToolCallStream hermes(ToolFormat::Hermes);
  EXPECT_TRUE(hermes.feed("<tool_call>{\"arguments\": {\"x\": 1}, ").empty());
  StreamDelta delta = hermes.feed("\"name\": \"f\"}</tool_call>");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].name, "f");
  EXPECT_EQ(delta.calls[0].arguments, "{\"x\": 1}");
}

TEST(ToolCallStream, TwoCallsInOnePiece) {
  ToolCallStream list(ToolFormat::JsonList);
  StreamDelta delta = list.feed(
      R"~([{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {}}])~");
  ASSERT_EQ(delta.calls.size(), 2u);
  EXPECT_EQ(delta.calls[0].index, 0);
  EXPECT_EQ(delta.calls[0].name, "a");
  EXPECT_EQ(delta.calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(delta.calls[1].index, 1);
  EXPECT_EQ(delta.calls[1].name, "b");
  EXPECT_EQ(delta.calls[1].arguments, "{}");
  EXPECT_TRUE(list.finish().empty());
  EXPECT_EQ(list.error(), "");
}

std::string chatTemplate(const std::string &name) {
  std::ifstream in(std::string(TPC_SOURCE_DIR) + "/test/conformance/Inputs/chat_templates/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ToolCallFormat, OfChatTemplates) {
  EXPECT_EQ(toolFormatOf(chatTemplate("qwen2.5-instruct.jinja")), ToolFormat::Hermes);
  EXPECT_EQ(toolFormatOf(chatTemplate("qwen3.jinja")), ToolFormat::Hermes);
  EXPECT_EQ(toolFormatOf(chatTemplate("smollm3.jinja")), ToolFormat::Hermes);
  EXPECT_EQ(toolFormatOf(chatTemplate("llama3.1-8b-instruct.jinja")), ToolFormat::Llama3Json);
  EXPECT_EQ(toolFormatOf(chatTemplate("llama3.2-1b-instruct.jinja")), ToolFormat::Llama3Json);
  EXPECT_EQ(toolFormatOf(chatTemplate("mistral-7b-instruct-v0.3.jinja")), ToolFormat::Mistral);
  EXPECT_FALSE(toolFormatOf(chatTemplate("smollm2-135m-instruct.jinja")));
  // Llama 4's template asks for Python-style calls where it puts the tools in the user's
  // message (its default), JSON only in the system message: not one format tpc reads.
  EXPECT_FALSE(toolFormatOf(chatTemplate("llama4-instruct.jinja")));
  EXPECT_FALSE(toolFormatOf(""));
}

} // namespace
} // namespace tpcrt::serve
