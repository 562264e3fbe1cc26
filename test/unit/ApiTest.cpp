// tpc serve's request reader and response shapes (runtime/serve/api.h) for what scores a
// prompt and what asks for several choices: echo, prompt_logprobs, max_tokens 0, n, and the
// bound on the log-probabilities an answer may hold; tools and tool_choice (what the template
// sees, the grammar a choice asks for, the errors, the shapes of calls and their deltas); against the example's byte-level
// tokenizer (an id is a byte), so each expected value is worked out here by hand.
#include "api.h"

#include "tpcrt/tokenizer.h"

#include <gtest/gtest.h>

namespace tpcrt::serve {
namespace {

struct Reader {
  Reader() {
    spec.name = "api";
    spec.tp = 1;
    spec.vocab = 256;
    defaults.maxSeqLen = 4096;
    defaults.params.sampling.temperature = 0;
    std::string error;
    context.spec = &spec;
    context.defaults = &defaults;
    context.tokenizer = Tokenizer::load(TPC_EXAMPLES_DIR, error);
    context.modelName = "api";
    context.chatTemplate = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    if (!context.tokenizer)
      ADD_FAILURE() << error;
  }
  /// The request, or its error's message.
  std::string read(const std::string &body, ApiRequest &request, bool chat = false) {
    std::optional<ApiError> bad = readRequest(body, chat, context, request);
    return bad ? bad->param + ": " + bad->message : "";
  }
  ModelSpec spec{};
  Args defaults;
  ApiContext context;
};

TEST(Api, EchoKeepsThePromptsTextAndScoresWithTheMostLikelyEitherAsks) {
  Reader r;
  ApiRequest a;
  ASSERT_EQ(r.read(R"({"prompt": "hi there", "echo": true, "logprobs": 3, "max_tokens": 0,
                       "prompt_logprobs": 1})", a), "");
  EXPECT_TRUE(a.params.echo);
  EXPECT_EQ(a.promptText, "hi there");
  EXPECT_EQ(a.params.prompt, (std::vector<int64_t>{'h', 'i', ' ', 't', 'h', 'e', 'r', 'e'}));
  EXPECT_EQ(a.params.maxTokens, 0);
  EXPECT_EQ(a.promptLogprobs, 1);
  EXPECT_EQ(a.params.promptLogprobs, 3); // echo's 3 most likely, more than prompt_logprobs' 1
  ApiRequest ids;
  ASSERT_EQ(r.read(R"({"prompt": [[111, 107]], "echo": true, "max_tokens": 1})", ids), "");
  EXPECT_EQ(ids.promptText, "ok"); // ids' text
  EXPECT_EQ(ids.params.promptLogprobs, -1); // echo without logprobs scores nothing
}

TEST(Api, MaxTokensZeroOnlyScores) {
  Reader r;
  ApiRequest a;
  EXPECT_EQ(r.read(R"({"prompt": "x", "max_tokens": 0})", a),
            "max_tokens: field 'max_tokens' 0 generates nothing: it is for scoring a prompt "
            "(with 'prompt_logprobs', or 'echo' on /v1/completions)");
  ApiRequest chat;
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", chat,
                   true),
            "max_tokens: field 'max_tokens' 0 generates nothing: it is for scoring a prompt "
            "(with 'prompt_logprobs', or 'echo' on /v1/completions)");
  ApiRequest scored;
  EXPECT_EQ(r.read(R"({"prompt": "x", "max_tokens": 0, "prompt_logprobs": 0})", scored), "");
}

TEST(Api, ChoicesAreBoundedAndSoAreTheLogprobsTheyWouldHold) {
  Reader r;
  for (const char *n : {"0", "17", "2.5", "\"4\""}) {
    ApiRequest a;
    EXPECT_NE(r.read(std::string(R"({"prompt": "x", "n": )") + n + "}", a).find("n: field 'n' "
                                                                                 "must be"),
              std::string::npos)
        << n;
  }
  // n x tokens x 21 entries against 2^20 = 1048576: 16 x 3110 x 21 = 1044960 fit; the
  // 20-token prompt echoed, or scored with its top 20, makes 16 x 3130 x 21 = 1051680.
  const std::string base = R"({"prompt": "abcdefghijklmnopqrst", "n": 16, "logprobs": 20,
                               "max_tokens": 3110)";
  ApiRequest fine;
  ASSERT_EQ(r.read(base + "}", fine), "");
  EXPECT_EQ(fine.n, 16);
  const std::string refused =
      "the log-probabilities asked for come to 1051680 entries (n x (max_tokens, unless "
      "streamed, and echoed prompt tokens x (logprobs + 1) + prompt tokens x (prompt_logprobs "
      "+ 1))), more than the limit of 1048576; ask for fewer choices, tokens or most likely "
      "tokens";
  ApiRequest echoed, scored, streamed;
  EXPECT_EQ(r.read(base + R"(, "echo": true})", echoed), "logprobs: " + refused);
  EXPECT_EQ(r.read(base + R"(, "prompt_logprobs": 20})", scored), "logprobs: " + refused);
  // Streamed, the generated tokens' entries go chunk by chunk: not counted.
  EXPECT_EQ(r.read(base + R"(, "echo": true, "stream": true})", streamed), "");
}

TEST(Api, EchoedLogprobsBeginWithTheFirstTokenNullAndCountCharacters) {
  Reader r;
  // The prompt "ab", scored: b's entry; the answer's "c" after it.
  std::vector<TokenLogprobs> scored = {{'b', -1.5, {{'x', -0.5}, {'b', -1.5}}}};
  int64_t offset = 0;
  nlohmann::ordered_json echoed = echoLogprobs(*r.context.tokenizer, {'a', 'b'}, scored, 1,
                                               offset);
  TokenLogprobs c{'c', -0.25, {{'c', -0.25}}};
  appendLogprobs(echoed, logprobsOf(false, *r.context.tokenizer, &c, &c + 1, offset));
  EXPECT_EQ(echoed.dump(), R"({"text_offset":[0,1,2],"token_logprobs":[null,-1.5,-0.25],)"
                           R"("tokens":["a","b","c"],"top_logprobs":[null,{"x":-0.5,"b":-1.5},)"
                           R"({"c":-0.25}]})");
  EXPECT_EQ(offset, 3);
}

TEST(Api, PromptLogprobsAreVllmsDictsTheTokenFirst) {
  Reader r;
  TokenLogprobs b{'b', -2.0, {{'x', -0.5}, {'b', -2.0}, {'y', -3.0}}};
  b.rank = 2;
  nlohmann::ordered_json shown = promptLogprobsOf(*r.context.tokenizer, {b}, 2);
  EXPECT_EQ(shown.dump(),
            R"([null,{"98":{"logprob":-2.0,"rank":2,"decoded_token":"b"},)"
            R"("120":{"logprob":-0.5,"rank":1,"decoded_token":"x"}}])");
}


// tools and tool_choice: what the template is given, and what a choice asks of the answer.
constexpr const char *kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "sum",
   "parameters": {"type": "object", "properties": {"v": {"$ref": "#/$defs/N"}},
                  "$defs": {"N": {"type": "number"}}}}}])";

std::string chat(const std::string &fields) {
  return std::string(R"({"messages": [{"role": "user", "content": "hi"}], "tools": )") + kTools +
         (fields.empty() ? "" : ", " + fields) + "}";
}

TEST(Api, ToolsAndToolTurnsReachTheTemplateInTheirOrder) {
  Reader r;
  r.context.chatTemplate =
      "{{ tools|map(attribute='function')|map(attribute='name')|join(',') }}|"
      "{{ tools[0]|tojson }}|{% for m in messages %}{{ m.role }}:{{ m.content }}"
      "{% if m.tool_calls %}{{ m.tool_calls[0].id }}={{ m.tool_calls[0].function|tojson }}"
      "{% endif %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %};{% endfor %}";
  ApiRequest a;
  ASSERT_EQ(r.read(std::string(R"({"messages": [{"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "abc", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"z\": 1, \"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "abc", "content": "cold"}], "tools": )") + kTools + "}",
                   a, /*chat=*/true),
            "");
  std::string text(a.params.prompt.begin(), a.params.prompt.end()); // a byte an id
  EXPECT_EQ(text,
            "get_weather,sum|{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
            "\"description\": \"Weather.\", \"parameters\": {\"type\": \"object\", "
            "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}|"
            "user:w?;assistant:abc={\"name\": \"get_weather\", \"arguments\": {\"z\": 1, "
            "\"city\": \"Oslo\"}};tool:cold#abc;");
  EXPECT_FALSE(a.toolFormat); // auto, and this template teaches no format
  EXPECT_EQ(a.structured.kind, StructuredSpec::None);
}

TEST(Api, RequiredAndNamedToolChoicesConstrainTheAnswerToTheCall) {
  Reader r;
  ApiRequest required;
  ASSERT_EQ(r.read(chat(R"("tool_choice": "required", "parallel_tool_calls": false)"), required,
                   true),
            "");
  EXPECT_EQ(required.toolFormat, ToolFormat::JsonList);
  EXPECT_EQ(required.structured.field, "tool_choice");
  // A list of one call at most, of either tool, the second's $defs moved to the root.
  EXPECT_EQ(nlohmann::json::parse(required.structured.text), nlohmann::json::parse(R"({
    "type": "array", "minItems": 1, "maxItems": 1, "items": {"anyOf": [
      {"type": "object", "properties": {"name": {"type": "string", "enum": ["get_weather"]},
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}},
       "required": ["name", "parameters"], "additionalProperties": false},
      {"type": "object", "properties": {"name": {"type": "string", "enum": ["sum"]},
        "parameters": {"type": "object", "properties": {"v": {"$ref": "#/$defs/N"}}}},
       "required": ["name", "parameters"], "additionalProperties": false}]},
    "$defs": {"N": {"type": "number"}}})"));
  ApiRequest named;
  ASSERT_EQ(r.read(chat(R"("tool_choice": {"type": "function", "function": {"name": "sum"}})"),
                   named, true),
            "");
  EXPECT_EQ(named.toolFormat, ToolFormat::Named);
  EXPECT_EQ(named.namedTool, "sum");
  EXPECT_EQ(nlohmann::json::parse(named.structured.text), nlohmann::json::parse(R"(
    {"type": "object", "properties": {"v": {"$ref": "#/$defs/N"}},
     "$defs": {"N": {"type": "number"}}})"));
  ApiRequest none;
  ASSERT_EQ(r.read(chat(R"("tool_choice": "none")"), none, true), "");
  EXPECT_FALSE(none.toolFormat);
  EXPECT_EQ(none.structured.kind, StructuredSpec::None);
  r.context.chatTemplate = "{% for m in messages %}{{ m.content }}{% endfor %}<tool_call>";
  ApiRequest hermes;
  ASSERT_EQ(r.read(chat(""), hermes, true), "");
  EXPECT_EQ(hermes.toolFormat, ToolFormat::Hermes);
}

TEST(Api, BadToolRequestsAreRefusedNamingTheField) {
  Reader r;
  ApiRequest a;
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}],
                       "tool_choice": "required"})", a, true),
            "tool_choice: field 'tool_choice' needs 'tools' to choose from");
  EXPECT_EQ(r.read(chat(R"("tool_choice": {"type": "function", "function": {"name": "nope"}})"),
                   a, true),
            "tool_choice: field 'tool_choice' names the function 'nope', which is not one of "
            "the tools");
  EXPECT_EQ(r.read(chat(R"("tool_choice": "sometimes")"), a, true),
            "tool_choice: field 'tool_choice' must be \"none\", \"auto\", \"required\" or "
            "{\"type\": \"function\", \"function\": {\"name\": ...}}, not \"sometimes\"");
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}], "tools": [
                       {"type": "function", "function": {"name": "a b"}}]})", a, true),
            "tools[0].function.name: field 'tools[0].function.name' must be 1 to 64 of a-z, "
            "A-Z, 0-9, _ and -");
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}], "tools": [
                       {"type": "function", "function": {"name": "a"}},
                       {"type": "function", "function": {"name": "a"}}]})", a, true),
            "tools[1].function.name: field 'tools[1].function.name': \"a\" is given twice");
  EXPECT_EQ(r.read(chat(R"("tool_choice": "required", "response_format": {"type": "json_object"})"),
                   a, true)
                .substr(0, 60),
            "tool_choice: field 'tool_choice': a required or named tool c");
  EXPECT_EQ(r.read(R"({"prompt": "x", "tools": [], "max_tokens": 1})", a),
            "tools: field 'tools' is the chat API's");
  EXPECT_EQ(r.read(R"({"messages": [{"role": "tool", "content": "x"}]})", a, true),
            "messages[0].tool_call_id: field 'messages[0].tool_call_id' must be given, the id of "
            "the call this is the result of");
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", a,
                   true),
            "messages[0].tool_calls: field 'messages[0].tool_calls': only an assistant message "
            "calls tools");
  EXPECT_EQ(r.read(R"({"messages": [{"role": "assistant", "tool_calls": [{"function":
                       {"name": "f", "arguments": "{oops"}}]}]})", a, true)
                .substr(0, 110),
            "messages[0].tool_calls[0].function.arguments: field "
            "'messages[0].tool_calls[0].function.arguments' is not JSON");
  // A tool's schema is checked where it is compiled: under required, naming the keyword.
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                       "tools": [{"type": "function", "function": {"name": "f", "parameters":
                       {"type": "object", "patternProperties": {}}}}]})", a, true),
            "tools[0].function.parameters: field 'tools[0].function.parameters': keyword "
            "'patternProperties' is not supported (at #)");
}

TEST(Api, ToolParametersAreAnObjectAndKeepTheirReferencesUnderRequired) {
  Reader r;
  auto with = [&](const std::string &parameters, const std::string &choice, ApiRequest &a) {
    a = ApiRequest();
    return r.read(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": )" +
                      choice + R"(, "tools": [{"type": "function", "function": {"name": "f",
                      "parameters": )" + parameters + "}}]}",
                  a, true);
  };
  const std::string named = R"({"type": "function", "function": {"name": "f"}})";
  ApiRequest a;
  // A schema that says nothing of its type is an object's; another type is refused.
  ASSERT_EQ(with("{}", named, a), "");
  EXPECT_EQ(nlohmann::json::parse(a.structured.text), nlohmann::json::parse(R"({"type": "object"})"));
  EXPECT_EQ(with(R"({"type": "string"})", named, a),
            "tools[0].function.parameters: field 'tools[0].function.parameters': a tool's "
            "parameters are an object, not of type \"string\"");
  // Under required each schema sits inside the list of calls: a reference to its own root
  // would point elsewhere there. Named keeps the schema whole, so it may.
  const std::string recursive =
      R"({"type": "object", "properties": {"child": {"$ref": "#"}}})";
  EXPECT_EQ(with(recursive, "\"required\"", a),
            "tools: field 'tools': the parameters of 'f' refer to \"#\", which tool_choice "
            "'required' cannot keep (it nests each tool's schema in a list of calls): refer "
            "into #/$defs/");
  EXPECT_EQ(with(recursive, named, a), "");
  // A property named "$ref", or "$ref" among an enum's values, refers to nothing.
  EXPECT_EQ(with(R"({"type": "object", "properties": {"$ref": {"type": "string",
                  "enum": [{"$ref": "#"}]}}})",
                 "\"required\"", a),
            "");
  ApiRequest one;
  ASSERT_EQ(r.read(chat(R"("parallel_tool_calls": false)"), one, true), "");
  EXPECT_FALSE(one.parallelToolCalls);
}

TEST(Api, TooManyKeysAreRefusedBeforeTheBodyIsReadInOrder) {
  Reader r;
  // "k0": 0, "k1": 0, ... `count` keys of one object.
  auto keys = [](int count) {
    std::string text;
    for (int k = 0; k < count; ++k)
      text += (k ? ", \"k" : "\"k") + std::to_string(k) + "\": 0";
    return "{" + text + "}";
  };
  ApiRequest a;
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}], "x": )" + keys(4097) + "}",
                   a, true),
            ": the body is not JSON: an object has more than 4096 keys");
  // Sixteen objects of 4096 keys pass the first bound; together they are past the second.
  std::string many;
  for (int k = 0; k < 17; ++k)
    many += (k ? ", " : "") + keys(4096);
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}], "x": [)" + many + "]}",
                   a, true),
            ": the body is not JSON: it has more than 65536 keys in all");
}

TEST(Api, AnAnswerWithCallsHasNullContentIdsAndStreamsDeltas) {
  ResponseHead head{"chatcmpl-1-0", 7, "m", true};
  ChoiceResult c{"", "tool_calls", nullptr, {{"sum", "{\"v\": 1}"}}};
  nlohmann::ordered_json r = response(head, {c}, Usage{});
  const nlohmann::ordered_json &message = r["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  std::string id = message["tool_calls"][0]["id"];
  EXPECT_EQ(id.size(), 9u);
  EXPECT_EQ(id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
            std::string::npos);
  EXPECT_EQ(message["tool_calls"][0]["function"].dump(), R"({"name":"sum","arguments":"{\"v\": 1}"})");
  EXPECT_NE(toolCallId("chatcmpl-1-0", 0, 1), id); // another call, another id
  // The stream: the first delta of a call has its id, type and name; the next only arguments.
  nlohmann::ordered_json first = toolChunk(head, {{0, "sum", "{\"v\""}}, nullptr, 0);
  nlohmann::ordered_json next = toolChunk(head, {{0, "", ": 1}"}}, nullptr, 0);
  EXPECT_EQ(first["choices"][0]["delta"].dump(),
            R"({"tool_calls":[{"index":0,"id":")" + id +
                R"(","type":"function","function":{"name":"sum","arguments":"{\"v\""}}]})");
  EXPECT_EQ(next["choices"][0]["delta"].dump(),
            R"({"tool_calls":[{"index":0,"function":{"arguments":": 1}"}}]})");
}

} // namespace
} // namespace tpcrt::serve
