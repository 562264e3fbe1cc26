// The OpenAI API's requests and responses (api.h), with vLLM's fields and shapes. A request
// comes from anyone who can reach the port: it is parsed with a bounded depth, every field is
// checked with an error naming it, fields that would change the result and are not
// implemented are refused by name, and unknown fields that change nothing are ignored (as
// OpenAI's clients send some: "store", "metadata", "service_tier").
#include "api.h"

#include "tpcrt/chat_template.h"
#include "tpcrt/json.h"

#include <algorithm>
#include <set>

namespace tpcrt::serve {

namespace {

constexpr int kMaxJsonDepth = 32; // (a pydantic model's schema, nested in the request)
/// The most keys of one object in a request, and of the whole body: a chat's body is read
/// again keeping the keys' order (for the template and the schemas), which costs the square of
/// each object's keys (at these bounds, about 1.3e8 comparisons at most).
constexpr size_t kMaxObjectKeys = 4096, kMaxBodyKeys = 65536;

/// Fields that would change the result, not implemented here: refused by name. (best_of is
/// refused unless 1, a chat's echo unless false, suffix unless null.)
const std::set<std::string> kNotImplemented = {
    "functions", "function_call", "bad_words",
    "allowed_token_ids", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "use_beam_search", "length_penalty", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
    "reasoning_effort", "audio", "modalities", "prediction", "web_search_options"};

ApiError invalid(std::string message, std::string param = "", std::string code = "") {
  return {400, std::move(message), std::move(param), std::move(code)};
}

ApiError notImplemented(const std::string &field) {
  return invalid("field '" + field + "' is not implemented by tpc serve (it would change the "
                 "result)",
                 field, "not_implemented");
}

/// A chat message's content: a string, or a list of text parts ({"type": "text", "text"}).
std::optional<ApiError> contentOf(const nlohmann::ordered_json &value, size_t index,
                                  std::string &into) {
  std::string param = "messages[" + std::to_string(index) + "].content";
  if (value.is_string()) {
    into = value.get<std::string>();
    return std::nullopt;
  }
  if (!value.is_array())
    return invalid("field '" + param + "' must be a string or a list of text parts, not " +
                       value.dump().substr(0, 80),
                   param);
  for (const nlohmann::ordered_json &part : value) {
    auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return invalid("field '" + param + "': only text parts ({\"type\": \"text\", \"text\": "
                     "...}) are supported, not " + part.dump().substr(0, 80),
                     param);
    into += part["text"].get<std::string>();
  }
  return std::nullopt;
}

/// An assistant message's tool_calls as the template is to see them: each {"id", "type":
/// "function", "function": {"name", "arguments"}} with its arguments (a JSON text in the API)
/// parsed into an object, as vLLM hands them to templates (which write them with tojson).
std::optional<ApiError> toolCallsOf(const nlohmann::ordered_json &value, const std::string &at,
                                    nlohmann::ordered_json &into) {
  if (!value.is_array())
    return invalid("field '" + at + "' must be a list of tool calls", at);
  into = nlohmann::ordered_json::array();
  for (size_t k = 0; k < value.size(); ++k) {
    std::string call = at + "[" + std::to_string(k) + "]";
    const nlohmann::ordered_json &c = value[k];
    auto function = c.is_object() ? c.find("function") : c.end();
    if (function == c.end() || !function->is_object() || !function->contains("name") ||
        !(*function)["name"].is_string())
      return invalid("field '" + call + "' must be {\"id\", \"type\": \"function\", "
                     "\"function\": {\"name\", \"arguments\"}}",
                     call);
    nlohmann::ordered_json arguments = function->value("arguments", nlohmann::ordered_json());
    if (arguments.is_string()) {
      try {
        parseUntrustedJson(arguments.get<std::string>(), kMaxJsonDepth, kMaxObjectKeys,
                           kMaxBodyKeys);
        arguments = nlohmann::ordered_json::parse(arguments.get<std::string>());
      } catch (const std::exception &e) {
        return invalid("field '" + call + ".function.arguments' is not JSON: " + e.what(),
                       call + ".function.arguments");
      }
    }
    if (!arguments.is_object())
      return invalid("field '" + call + ".function.arguments' must be a JSON object (as text)",
                     call + ".function.arguments");
    nlohmann::ordered_json out;
    if (c.contains("id") && !c["id"].is_null()) {
      if (!c["id"].is_string())
        return invalid("field '" + call + ".id' must be a string", call + ".id");
      out["id"] = c["id"];
    }
    out["type"] = "function";
    out["function"] = {{"name", (*function)["name"]}, {"arguments", std::move(arguments)}};
    into.push_back(std::move(out));
  }
  return std::nullopt;
}

/// The chat's messages, rendered through the chat template with `tools` (a list, or null), as
/// the prompt's text (with the assistant's turn begun where `generationPrompt`). Each message
/// goes to the template as role, content (a string; "" for an assistant turn that only calls
/// tools, as vLLM gives it), tool_calls, and a tool result's tool_call_id, with a name where
/// given.
std::optional<ApiError> renderMessages(const nlohmann::ordered_json &value,
                                       const nlohmann::ordered_json &tools,
                                       const ApiContext &context, std::string &text,
                                       bool generationPrompt = true) {
  if (!value.is_array() || value.empty())
    return invalid("field 'messages' must be a non-empty list of messages", "messages");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < value.size(); ++i) {
    const nlohmann::ordered_json &m = value[i];
    std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object())
      return invalid("field '" + at + "' must be an object with a role and a content", at);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return invalid("field '" + at + ".role' must be given, a string", at + ".role");
    static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant",
                                                 "tool"};
    if (!kRoles.count(role->get<std::string>()))
      return invalid("field '" + at + ".role': unknown role " + role->dump() +
                         " (system, developer, user, assistant or tool)",
                     at + ".role");
    if (m.contains("function_call") && !m["function_call"].is_null())
      return notImplemented(at + ".function_call");
    // A developer message is OpenAI's newer name for a system message.
    nlohmann::ordered_json message = {{"role", *role == "developer" ? "system" : *role}};
    auto calls = m.find("tool_calls");
    bool calling = calls != m.end() && !calls->is_null();
    if (calling && *role != "assistant")
      return invalid("field '" + at + ".tool_calls': only an assistant message calls tools",
                     at + ".tool_calls");
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (!calling)
        return invalid("field '" + at + ".content' must be given", at + ".content");
      // An empty text, as vLLM gives it: templates that know no tools add it to strings.
      message["content"] = "";
    } else {
      std::string joined;
      if (std::optional<ApiError> bad = contentOf(*content, i, joined))
        return bad;
      message["content"] = std::move(joined);
    }
    if (calling) {
      nlohmann::ordered_json list;
      if (std::optional<ApiError> bad = toolCallsOf(*calls, at + ".tool_calls", list))
        return bad;
      message["tool_calls"] = std::move(list);
    }
    if (*role == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string())
        return invalid("field '" + at + ".tool_call_id' must be given, the id of the call "
                       "this is the result of",
                       at + ".tool_call_id");
      message["tool_call_id"] = *id;
    }
    if (auto name = m.find("name"); name != m.end() && !name->is_null()) {
      if (!name->is_string())
        return invalid("field '" + at + ".name' must be a string", at + ".name");
      message["name"] = *name;
    }
    messages.push_back(std::move(message));
  }
  if (!context.chatTemplate)
    return invalid("chat completions need the checkpoint's chat template: " +
                       context.chatTemplateError,
                   "messages");
  ChatOptions options;
  options.addGenerationPrompt = generationPrompt;
  options.bosToken = context.tokenizer->bosToken();
  options.eosToken = context.tokenizer->eosToken();
  std::string error;
  std::optional<std::string> rendered =
      renderChatTemplate(*context.chatTemplate, messages, tools, options, error);
  if (!rendered)
    return invalid("the chat template failed on these messages: " + error, "messages");
  text = std::move(*rendered);
  return std::nullopt;
}

/// The most tools a request may give (OpenAI's limit).
constexpr size_t kMaxTools = 128;

/// The chat's tools: a list of {"type": "function", "function": {"name", "description",
/// "parameters", "strict"}}, each name a-z, A-Z, 0-9, _ and - (at most 64, OpenAI's rule) and
/// given once; into `names`, in order.
std::optional<ApiError> readTools(const nlohmann::ordered_json &value,
                                  std::vector<std::string> &names) {
  if (!value.is_array() || value.empty() || value.size() > kMaxTools)
    return invalid("field 'tools' must be a list of 1 to " + std::to_string(kMaxTools) +
                       " tools",
                   "tools");
  for (size_t k = 0; k < value.size(); ++k) {
    std::string at = "tools[" + std::to_string(k) + "]";
    const nlohmann::ordered_json &tool = value[k];
    auto function = tool.is_object() ? tool.find("function") : tool.end();
    if (!tool.is_object() || tool.value("type", nlohmann::ordered_json()) != "function" ||
        function == tool.end() || !function->is_object())
      return invalid("field '" + at + "' must be {\"type\": \"function\", \"function\": "
                     "{\"name\", \"description\", \"parameters\"}}",
                     at);
    auto name = function->find("name");
    const std::string kNameChars =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    if (name == function->end() || !name->is_string() || name->get<std::string>().empty() ||
        name->get<std::string>().size() > 64 ||
        name->get<std::string>().find_first_not_of(kNameChars) != std::string::npos)
      return invalid("field '" + at + ".function.name' must be 1 to 64 of a-z, A-Z, 0-9, _ "
                     "and -",
                     at + ".function.name");
    if (std::find(names.begin(), names.end(), name->get<std::string>()) != names.end())
      return invalid("field '" + at + ".function.name': " + name->dump() +
                         " is given twice",
                     at + ".function.name");
    if (auto description = function->find("description");
        description != function->end() && !description->is_string() && !description->is_null())
      return invalid("field '" + at + ".function.description' must be a string",
                     at + ".function.description");
    if (auto parameters = function->find("parameters");
        parameters != function->end() && !parameters->is_object() && !parameters->is_null())
      return invalid("field '" + at + ".function.parameters' must be a JSON schema (an object)",
                     at + ".function.parameters");
    names.push_back(name->get<std::string>());
  }
  return std::nullopt;
}

/// The parameters' schema of the tool named `name` ({"type": "object"} where it gives none),
/// its keywords checked.
std::optional<ApiError> parametersOf(const nlohmann::ordered_json &tools, const std::string &name,
                                     nlohmann::ordered_json &schema) {
  for (size_t k = 0; k < tools.size(); ++k) {
    const nlohmann::ordered_json &function = tools[k]["function"];
    if (function["name"] != name)
      continue;
    schema = function.value("parameters", nlohmann::ordered_json());
    if (schema.is_null())
      schema = nlohmann::ordered_json::object();
    std::string at = "tools[" + std::to_string(k) + "].function.parameters";
    // Arguments are an object: a schema that says nothing of its type is one; one of another
    // type could never be read back as a call.
    auto type = schema.find("type");
    if (type == schema.end())
      schema["type"] = "object";
    else if (*type != "object")
      return invalid("field '" + at + "': a tool's parameters are an object, not of type " +
                         type->dump(),
                     at);
    if (std::string bad = checkSchemaKeywords(schema); !bad.empty())
      return invalid("field '" + at + "': " + bad, at);
    return std::nullopt;
  }
  return invalid("field 'tool_choice' names the function '" + name +
                     "', which is not one of the tools",
                 "tool_choice");
}

/// tool_choice "required": the schema of tpc's model-independent form of the calls, a list of
/// {"name": one of the tools, "parameters": its arguments} (one at most unless parallel), as
/// vLLM constrains it. Each tool's $defs (the openai client's parse() emits them) go to the
/// list's root, where their "#/$defs/..." references then point.
/// The first "$ref" in `schema` that does not point into "#/$defs/" or "#/definitions/" (the
/// ones that still point where they did once the tool's schema sits inside another), or "".
/// Walked as a schema, by the keywords checkSchemaKeywords lets through: a property named
/// "$ref", or a "$ref" inside an enum's values, is no reference.
std::string localRef(const nlohmann::ordered_json &schema) {
  if (!schema.is_object())
    return "";
  for (const auto &[key, value] : schema.items()) {
    std::string found;
    if (key == "$ref") {
      bool intoDefs = value.is_string() && (value.get<std::string>().rfind("#/$defs/", 0) == 0 ||
                                            value.get<std::string>().rfind("#/definitions/", 0) == 0);
      found = intoDefs ? "" : value.dump();
    } else if (subschemasOf(key) == Subschemas::One) {
      found = localRef(value);
    } else if (subschemasOf(key) != Subschemas::None &&
               (value.is_object() || value.is_array())) { // schemas by name, or a list
      for (const auto &sub : value)
        if (found.empty())
          found = localRef(sub);
    }
    if (!found.empty())
      return found;
  }
  return "";
}

std::optional<ApiError> requiredSchema(const nlohmann::ordered_json &tools,
                                       const std::vector<std::string> &names, bool parallel,
                                       nlohmann::ordered_json &schema) {
  nlohmann::ordered_json anyOf = nlohmann::ordered_json::array(), defs;
  for (const std::string &name : names) {
    nlohmann::ordered_json parameters;
    if (std::optional<ApiError> bad = parametersOf(tools, name, parameters))
      return bad;
    if (std::string ref = localRef(parameters); !ref.empty())
      return invalid("field 'tools': the parameters of '" + name + "' refer to " + ref +
                         ", which tool_choice 'required' cannot keep (it nests each tool's "
                         "schema in a list of calls): refer into #/$defs/",
                     "tools");
    for (const char *key : {"$defs", "definitions"}) {
      auto own = parameters.find(key);
      if (own == parameters.end())
        continue;
      if (!own->is_object())
        return invalid("field 'tools': the parameters of '" + name + "' have a " + key +
                           " that is not an object",
                       "tools");
      for (const auto &[def, body] : own->items()) {
        nlohmann::ordered_json &slot = defs[key][def];
        if (!slot.is_null() && slot != body)
          return invalid("field 'tools': two tools define '" + std::string(key) + "/" + def +
                             "' differently, which tool_choice 'required' cannot combine",
                         "tools");
        slot = body;
      }
      parameters.erase(key);
    }
    anyOf.push_back({{"type", "object"},
                     {"properties",
                      {{"name", {{"type", "string"}, {"enum", {name}}}},
                       {"parameters", std::move(parameters)}}},
                     {"required", {"name", "parameters"}},
                     {"additionalProperties", false}});
  }
  schema = {{"type", "array"}, {"minItems", 1}};
  if (!parallel)
    schema["maxItems"] = 1;
  schema["items"] = {{"anyOf", std::move(anyOf)}};
  if (!defs.is_null())
    schema.update(defs);
  return std::nullopt;
}

/// tools and tool_choice into `request`: "none", "auto" (the default with tools: the answer is
/// read back in the template's tool format, where it teaches one), "required" or a named
/// function (the answer is constrained to the call, in a form of tpc's own, as vLLM does).
std::optional<ApiError> readToolUse(const nlohmann::ordered_json &body, const ApiContext &context,
                                    ApiRequest &request, nlohmann::ordered_json &tools) {
  auto given = body.find("tools");
  tools = given == body.end() ? nlohmann::ordered_json() : *given;
  std::vector<std::string> names;
  if (!tools.is_null())
    if (std::optional<ApiError> bad = readTools(tools, names))
      return bad;
  nlohmann::ordered_json choice = body.value("tool_choice", nlohmann::ordered_json());
  bool parallel = true;
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean())
      return invalid("field 'parallel_tool_calls' must be true or false", "parallel_tool_calls");
    parallel = p->get<bool>();
  }
  request.parallelToolCalls = parallel;
  if (choice.is_null())
    choice = names.empty() ? "none" : "auto";
  if (choice == "none")
    return std::nullopt;
  if (names.empty())
    return invalid("field 'tool_choice' needs 'tools' to choose from", "tool_choice");
  if (choice == "auto") {
    if (context.chatTemplate)
      request.toolFormat = toolFormatOf(*context.chatTemplate);
    return std::nullopt;
  }
  nlohmann::ordered_json schema;
  if (choice == "required") {
    if (std::optional<ApiError> bad = requiredSchema(tools, names, parallel, schema))
      return bad;
    request.toolFormat = ToolFormat::JsonList;
  } else {
    auto function = choice.is_object() ? choice.find("function") : choice.end();
    if (!choice.is_object() || choice.value("type", nlohmann::ordered_json()) != "function" ||
        function == choice.end() || !function->is_object() || !function->contains("name") ||
        !(*function)["name"].is_string())
      return invalid("field 'tool_choice' must be \"none\", \"auto\", \"required\" or "
                     "{\"type\": \"function\", \"function\": {\"name\": ...}}, not " +
                         choice.dump().substr(0, 80),
                     "tool_choice");
    request.namedTool = (*function)["name"].get<std::string>();
    if (std::optional<ApiError> bad = parametersOf(tools, request.namedTool, schema))
      return bad;
    request.toolFormat = ToolFormat::Named;
  }
  if (request.structured.kind != StructuredSpec::None)
    return invalid("field 'tool_choice': a required or named tool choice constrains the answer "
                   "to the call, which '" + request.structured.field + "' would constrain too: "
                   "give one",
                   "tool_choice");
  request.structured.kind = StructuredSpec::JsonSchema;
  request.structured.text = schema.dump();
  request.structured.field = "tool_choice";
  return std::nullopt;
}

/// A list of token ids of the vocabulary, into `ids`; an error naming `field` otherwise.
std::optional<ApiError> readIds(const nlohmann::json &list, const ApiContext &context,
                                const char *field, std::vector<int64_t> &ids) {
  for (const nlohmann::json &id : list) {
    int64_t token = -1;
    if (!jsonNumber(id, token).empty() || token < 0 || token >= context.spec->vocab)
      return invalid(std::string("field '") + field + "': " + id.dump() +
                         " is not a token id of the vocabulary of " +
                         std::to_string(context.spec->vocab),
                     field);
    ids.push_back(token);
  }
  return std::nullopt;
}

/// A completion's prompt: a string, a list of token ids, or a list of one of either.
std::optional<ApiError> readPrompt(const nlohmann::json &value, const ApiContext &context,
                                   RequestParams &params) {
  const nlohmann::json *prompt = &value;
  if (value.is_array() && value.size() == 1 && (value[0].is_string() || value[0].is_array()))
    prompt = &value[0];
  else if (value.is_array() && !value.empty() && !value[0].is_number())
    return invalid("field 'prompt': a batch of prompts is not implemented by tpc serve; send "
                   "one request per prompt",
                   "prompt", "not_implemented");
  if (prompt->is_string()) {
    std::string error;
    std::optional<std::vector<int64_t>> ids =
        context.tokenizer->encode(prompt->get<std::string>(), /*addSpecial=*/true, error);
    if (!ids)
      return invalid("field 'prompt': " + error, "prompt");
    params.prompt = std::move(*ids);
  } else if (prompt->is_array()) {
    if (std::optional<ApiError> bad = readIds(*prompt, context, "prompt", params.prompt))
      return bad;
  } else {
    return invalid("field 'prompt' must be a string or a list of token ids, not " +
                       value.dump(),
                   "prompt");
  }
  if (params.prompt.empty())
    return invalid("field 'prompt' is no tokens at all", "prompt");
  return std::nullopt;
}

/// A JSON schema given as an object (or, in structured_outputs.json, as its text), its keywords
/// checked, into `spec`.
std::optional<ApiError> readSchema(const nlohmann::ordered_json &value, const std::string &field,
                                   StructuredSpec &spec) {
  nlohmann::ordered_json schema = value;
  if (value.is_string()) {
    try {
      // bounded, then read in its order
      parseUntrustedJson(value.get<std::string>(), 64, kMaxObjectKeys, kMaxBodyKeys);
      schema = nlohmann::ordered_json::parse(value.get<std::string>());
    } catch (const std::exception &e) {
      return invalid("field '" + field + "' is not JSON: " + e.what(), field);
    }
  }
  if (!schema.is_object())
    return invalid("field '" + field + "' must be a JSON schema (an object), not " +
                       value.dump().substr(0, 80),
                   field);
  if (std::string bad = checkSchemaKeywords(schema); !bad.empty())
    return invalid("field '" + field + "': " + bad, field);
  spec.kind = StructuredSpec::JsonSchema;
  spec.text = schema.dump();
  return std::nullopt;
}

/// OpenAI's response_format: {"type": "text" | "json_object" | "json_schema", "json_schema":
/// {"name", "schema", "strict", "description"}}.
std::optional<ApiError> readResponseFormat(const nlohmann::ordered_json &value,
                                           StructuredSpec &spec) {
  const std::string field = "response_format";
  auto type = value.is_object() ? value.find("type") : value.end();
  if (!value.is_object() || type == value.end() || !type->is_string())
    return invalid("field 'response_format' must be an object with a 'type' (text, json_object "
                   "or json_schema), not " + value.dump().substr(0, 80),
                   field);
  if (*type == "text")
    return std::nullopt;
  if (*type == "json_object") {
    spec.kind = StructuredSpec::JsonObject;
    return std::nullopt;
  }
  if (*type != "json_schema")
    return invalid("field 'response_format': unknown type " + type->dump() +
                       " (text, json_object or json_schema)",
                   field);
  auto format = value.find("json_schema");
  if (format == value.end() || !format->is_object())
    return invalid("field 'response_format.json_schema' must be given, an object with a "
                   "'schema'",
                   field);
  for (const auto &[key, item] : format->items()) {
    if ((key == "name" || key == "description") && !item.is_string())
      return invalid("field 'response_format.json_schema." + key + "' must be a string", field);
    if (key == "strict" && !item.is_boolean() && !item.is_null())
      return invalid("field 'response_format.json_schema.strict' must be true or false", field);
    if (key != "name" && key != "description" && key != "strict" && key != "schema")
      return invalid("field 'response_format.json_schema': unknown field '" + key + "'", field);
  }
  auto schema = format->find("schema");
  if (schema == format->end())
    return invalid("field 'response_format.json_schema.schema' must be given", field);
  return readSchema(*schema, "response_format.json_schema.schema", spec);
}

/// vLLM's structured_outputs: one of {"json": schema, "regex", "choice": [...], "grammar",
/// "json_object": true}.
std::optional<ApiError> readStructuredOutputs(const nlohmann::ordered_json &value,
                                              StructuredSpec &spec) {
  const std::string field = "structured_outputs";
  if (!value.is_object())
    return invalid("field 'structured_outputs' must be an object, not " +
                       value.dump().substr(0, 80),
                   field);
  int given = 0;
  for (const auto &[key, item] : value.items()) {
    if (item.is_null())
      continue;
    std::string at = field + "." + key;
    ++given;
    if (key == "json") {
      if (std::optional<ApiError> bad = readSchema(item, at, spec))
        return bad;
    } else if (key == "regex" || key == "grammar") {
      if (!item.is_string() || item.get<std::string>().empty())
        return invalid("field '" + at + "' must be a non-empty string", field);
      spec.kind = key == "regex" ? StructuredSpec::Regex : StructuredSpec::Grammar;
      spec.text = item.get<std::string>();
    } else if (key == "choice") {
      if (!item.is_array() || item.empty())
        return invalid("field '" + at + "' must be a non-empty list of strings", field);
      for (const nlohmann::ordered_json &choice : item) {
        if (!choice.is_string() || choice.get<std::string>().empty())
          return invalid("field '" + at + "': each choice must be a non-empty string, not " +
                             choice.dump().substr(0, 80),
                         field);
        spec.choices.push_back(choice.get<std::string>());
      }
      spec.kind = StructuredSpec::Choice;
    } else if (key == "json_object") {
      if (!item.is_boolean())
        return invalid("field '" + at + "' must be true or false", field);
      if (item.get<bool>())
        spec.kind = StructuredSpec::JsonObject;
      else
        --given;
    } else {
      return notImplemented(at);
    }
  }
  if (given != 1)
    return invalid("field 'structured_outputs' must give exactly one of json, regex, choice, "
                   "grammar and json_object",
                   field);
  return std::nullopt;
}

/// A field that must hold one value to be accepted (n: 1, echo: false, ...).
bool only(const nlohmann::json &value, const nlohmann::json &accepted) {
  return value.is_null() || value == accepted;
}

} // namespace

std::string dump(const nlohmann::ordered_json &value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string errorBody(const ApiError &error) {
  const char *type = error.status == 404   ? "not_found_error"
                     : error.status == 503 ? "service_unavailable"
                     : error.status >= 500 ? "server_error"
                                           : "invalid_request_error";
  nlohmann::ordered_json e = {{"message", error.message}, {"type", type}};
  e["param"] = error.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param);
  e["code"] = error.code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.code);
  return dump({{"error", e}});
}

namespace {

/// The body as a JSON object, bounded in depth; an error otherwise.
std::optional<ApiError> parseObject(const std::string &body, nlohmann::json &j) {
  try {
    j = parseUntrustedJson(body, kMaxJsonDepth, kMaxObjectKeys, kMaxBodyKeys);
  } catch (const std::exception &e) {
    return invalid(std::string("the body is not JSON: ") + e.what());
  }
  if (!j.is_object())
    return invalid("the body must be a JSON object");
  return std::nullopt;
}

/// The request's "model", where given: this server's, else 404.
std::optional<ApiError> checkModel(const nlohmann::json &j, const ApiContext &context) {
  auto model = j.find("model");
  if (model == j.end() || model->is_null())
    return std::nullopt;
  if (!model->is_string())
    return invalid("field 'model' must be a string, not " + model->dump(), "model");
  if (*model != context.modelName)
    return ApiError{404, "the model '" + model->get<std::string>() + "' does not exist; this "
                    "server serves '" + context.modelName + "'",
                    "model", "model_not_found"};
  return std::nullopt;
}

/// A boolean field's value, `fallback` where not given or null; an error for anything else.
std::optional<ApiError> readFlag(const nlohmann::json &j, const char *field, bool fallback,
                                 bool &value) {
  auto found = j.find(field);
  value = fallback;
  if (found == j.end() || found->is_null())
    return std::nullopt;
  if (!found->is_boolean())
    return invalid(std::string("field '") + field + "' must be true or false, not " +
                       found->dump(),
                   field);
  value = found->get<bool>();
  return std::nullopt;
}

/// A request of the tokenizer's endpoints: a JSON object for this server's model, which has a
/// tokenizer.
std::optional<ApiError> readTokenizerRequest(const std::string &body, const ApiContext &context,
                                             nlohmann::json &j) {
  if (std::optional<ApiError> bad = parseObject(body, j))
    return bad;
  if (std::optional<ApiError> bad = checkModel(j, context))
    return bad;
  if (!context.tokenizer)
    return invalid("this server has no tokenizer for text");
  return std::nullopt;
}

} // namespace

std::optional<ApiError> readTokenize(const std::string &body, const ApiContext &context,
                                     std::vector<int64_t> &ids, bool &tokenStrings) {
  nlohmann::json j;
  if (std::optional<ApiError> bad = readTokenizerRequest(body, context, j))
    return bad;
  bool chat = j.contains("messages") && !j["messages"].is_null();
  bool prompt = j.contains("prompt") && !j["prompt"].is_null();
  if (chat == prompt)
    return invalid("give one of 'prompt' (a text) and 'messages' (a chat)",
                   chat ? "messages" : "prompt");
  bool addSpecial = false;
  // A prompt gets the tokenizer's special tokens (a completion's prompt does); a chat's
  // template writes its own, as a chat completion's prompt has them.
  if (std::optional<ApiError> bad = readFlag(j, "add_special_tokens", !chat, addSpecial))
    return bad;
  if (std::optional<ApiError> bad = readFlag(j, "return_token_strs", false, tokenStrings))
    return bad;
  std::string text;
  if (chat) {
    bool generationPrompt = true;
    if (std::optional<ApiError> bad =
            readFlag(j, "add_generation_prompt", true, generationPrompt))
      return bad;
    // (read again keeping the order of keys, as the template is to see them: the body is
    // known to be bounded JSON by now)
    nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body);
    std::vector<std::string> names;
    nlohmann::ordered_json tools = ordered.value("tools", nlohmann::ordered_json());
    if (!tools.is_null())
      if (std::optional<ApiError> bad = readTools(tools, names))
        return bad;
    if (std::optional<ApiError> bad = renderMessages(ordered["messages"], tools, context, text,
                                                     generationPrompt))
      return bad;
  } else {
    if (!j["prompt"].is_string())
      return invalid("field 'prompt' must be a text, not " + j["prompt"].dump(), "prompt");
    text = j["prompt"].get<std::string>();
  }
  std::string error;
  std::optional<std::vector<int64_t>> encoded = context.tokenizer->encode(text, addSpecial, error);
  if (!encoded)
    return invalid((chat ? "the rendered messages: " : "field 'prompt': ") + error,
                   chat ? "messages" : "prompt");
  ids = std::move(*encoded);
  return std::nullopt;
}

nlohmann::ordered_json tokenizeResponse(const std::vector<int64_t> &ids,
                                        const ApiContext &context, bool tokenStrings) {
  nlohmann::ordered_json strings;
  if (tokenStrings) {
    strings = nlohmann::ordered_json::array();
    for (int64_t id : ids) {
      std::optional<std::string> token = context.tokenizer->token(id);
      strings.push_back(token ? nlohmann::ordered_json(*token) : nlohmann::ordered_json());
    }
  }
  return {{"count", ids.size()},
          {"max_model_len", context.defaults->maxSeqLen},
          {"tokens", ids},
          {"token_strs", strings}};
}

std::optional<ApiError> readDetokenize(const std::string &body, const ApiContext &context,
                                       std::string &text) {
  nlohmann::json j;
  if (std::optional<ApiError> bad = readTokenizerRequest(body, context, j))
    return bad;
  auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array())
    return invalid("field 'tokens' must be given, a list of token ids", "tokens");
  std::vector<int64_t> ids;
  if (std::optional<ApiError> bad = readIds(*tokens, context, "tokens", ids))
    return bad;
  text = context.tokenizer->decode(ids, /*skipSpecial=*/false);
  return std::nullopt;
}

std::optional<ApiError> readRequest(const std::string &body, bool chat, const ApiContext &context,
                                    ApiRequest &request) {
  nlohmann::json j;
  if (std::optional<ApiError> bad = parseObject(body, j))
    return bad;
  request.chat = chat;
  RequestParams &params = request.params = context.defaults->params;
  params.prompt.clear();
  params.stop.clear();
  params.stopIds.clear();
  params.maxTokens = chat ? -1 : 16; // chat: the rest of the context (vLLM), completions: 16
  // Log-probabilities: chat's `logprobs` true with `top_logprobs` more (0 when not given), a
  // completion's `logprobs` N; none otherwise.
  bool chatLogprobs = false, completionLogprobs = false;
  int top = 0;
  if (std::optional<ApiError> bad = checkModel(j, context))
    return bad;
  const char *promptField = chat ? "messages" : "prompt";
  auto prompt = j.find(promptField);
  if (prompt == j.end())
    return invalid(std::string("field '") + promptField + "' must be given", promptField);
  if (!context.tokenizer)
    return invalid("this server has no tokenizer for text", promptField);
  for (const auto &[key, value] : j.items()) {
    if (key == "model" || key == promptField || value.is_null()) // null: not given
      continue;
    if (key == "max_completion_tokens" || key == "max_tokens") {
      if (std::optional<std::string> bad = readSamplingField("max_tokens", value, params);
          bad && !bad->empty())
        return invalid("field '" + key + bad->substr(std::string("field 'max_tokens").size()),
                       key);
    } else if (key == "stream") {
      if (!value.is_boolean())
        return invalid("field 'stream' must be true or false, not " + value.dump(), "stream");
      request.stream = value.get<bool>();
    } else if (key == "stream_options") {
      auto usage = value.is_object() ? value.find("include_usage") : value.end();
      if (!value.is_object() || (usage != value.end() && !usage->is_boolean()))
        return invalid("field 'stream_options' must be an object like {\"include_usage\": "
                       "true}, not " + value.dump(),
                       "stream_options");
      request.includeUsage = usage != value.end() && usage->get<bool>();
    } else if (key == "n") {
      if (!jsonNumber(value, request.n).empty() || request.n < 1 || request.n > kMaxChoices)
        return invalid("field 'n' must be an integer from 1 to " + std::to_string(kMaxChoices) +
                           ", not " + value.dump(),
                       key);
    } else if (key == "best_of") {
      if (!only(value, 1))
        return invalid("field '" + key + "': only 1 is implemented by tpc serve, not " +
                           value.dump(),
                       key, "not_implemented");
    } else if (key == "logprobs" && chat) { // chat: whether; top_logprobs: how many more
      if (!value.is_boolean())
        return invalid("field 'logprobs' must be true or false, not " + value.dump(), key);
      chatLogprobs = value.get<bool>();
    } else if (key == "logprobs" || key == "top_logprobs") { // completions: how many more
      if (key == "top_logprobs" && !chat)
        return invalid("field 'top_logprobs' is the chat API's; a completion asks for the most "
                       "likely tokens with 'logprobs': N (0 to " +
                           std::to_string(kMaxLogprobs) + ")",
                       key);
      if (std::string bad = readLogprobCount(key, value, top); !bad.empty())
        return invalid(bad, key);
      completionLogprobs = !chat;
    } else if (key == "echo" && !chat) { // the prompt first, in the text and the logprobs
      if (!value.is_boolean())
        return invalid("field 'echo' must be true or false, not " + value.dump(), key);
      params.echo = value.get<bool>();
    } else if (key == "echo") {
      if (!only(value, false))
        return notImplemented(key);
    } else if (key == "prompt_logprobs") {
      if (std::string bad = readLogprobCount(key, value, request.promptLogprobs); !bad.empty())
        return invalid(bad, key);
    } else if (key == "response_format" || key == "structured_outputs") {
      if (request.structured.kind != StructuredSpec::None)
        return invalid("give one of 'response_format' and 'structured_outputs'", key);
      // (read again keeping the order of its keys: a schema's properties come in the order it
      // gives them; the body is known to be bounded JSON by now)
      nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body)[key];
      request.structured.field = key;
      if (std::optional<ApiError> bad = key == "response_format"
                                            ? readResponseFormat(ordered, request.structured)
                                            : readStructuredOutputs(ordered, request.structured))
        return bad;
    } else if (key == "suffix" || kNotImplemented.count(key)) {
      return notImplemented(key);
    } else if (std::optional<std::string> bad = readSamplingField(key, value, params)) {
      if (!bad->empty())
        return invalid(*bad, key);
    } // anything else changes nothing here: ignored, as the OpenAI clients send such fields
  }
  if (chat && top > 0 && !chatLogprobs)
    return invalid("field 'top_logprobs' needs 'logprobs': true", "top_logprobs");
  params.logprobs = chatLogprobs || completionLogprobs ? top : -1;
  // The engine scores the prompt for prompt_logprobs, and for echo with logprobs (its prompt's
  // tokens in the logprobs too), with the most likely tokens either asks for.
  params.promptLogprobs = request.promptLogprobs;
  if (params.echo && params.logprobs >= 0)
    params.promptLogprobs = std::max(params.promptLogprobs, params.logprobs);
  if (request.promptLogprobs >= 0 && request.stream)
    return invalid("field 'prompt_logprobs' is not available with stream: true (as vLLM's)",
                   "prompt_logprobs");
  if (request.includeUsage && !request.stream)
    return invalid("field 'stream_options' is only for streamed requests (stream: true)",
                   "stream_options");
  if (request.structured.kind != StructuredSpec::None && params.ignoreEos)
    return invalid("field 'ignore_eos' cannot be used with structured outputs: the grammar "
                   "ends the answer at its end-of-sequence token",
                   "ignore_eos");
  if (std::string why = params.sampling.validate(); !why.empty()) { // "top_p must be ..."
    std::string field = why.substr(0, why.find(' '));
    return invalid("field '" + field + "'" + why.substr(why.find(' ')), field);
  }
  if (!chat)
    for (const char *key : {"tools", "tool_choice", "parallel_tool_calls"})
      if (j.contains(key) && !j[key].is_null())
        return invalid(std::string("field '") + key + "' is the chat API's", key);
  if (chat) {
    // (read again keeping the order of keys, as the template is to see them)
    nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body), tools;
    if (std::optional<ApiError> bad = readToolUse(ordered, context, request, tools))
      return bad;
    if (request.structured.field == "tool_choice" && params.ignoreEos)
      return invalid("field 'ignore_eos' cannot be used with a required or named tool choice: "
                     "the call's grammar ends the answer at its end-of-sequence token",
                     "ignore_eos");
    std::string text, error;
    if (std::optional<ApiError> bad = renderMessages(ordered["messages"], tools, context, text))
      return bad;
    // apply_chat_template tokenizes what the template wrote, adding no special tokens.
    std::optional<std::vector<int64_t>> ids =
        context.tokenizer->encode(text, /*addSpecial=*/false, error);
    if (!ids)
      return invalid("the rendered messages: " + error, "messages");
    if (ids->empty())
      return invalid("the rendered messages are no tokens at all", "messages");
    params.prompt = std::move(*ids);
  } else if (std::optional<ApiError> bad = readPrompt(*prompt, context, params)) {
    return bad;
  } else if (params.echo) { // the text as given, or the ids' text
    const nlohmann::json &given = prompt->is_array() && prompt->size() == 1 &&
                                          ((*prompt)[0].is_string() || (*prompt)[0].is_array())
                                      ? (*prompt)[0]
                                      : *prompt;
    request.promptText = given.is_string()
                             ? given.get<std::string>()
                             : context.tokenizer->decode(params.prompt, /*skipSpecial=*/false);
  }
  int64_t contextLen = context.defaults->maxSeqLen, promptTokens = int64_t(params.prompt.size());
  if (promptTokens >= contextLen)
    return invalid("the prompt is " + std::to_string(promptTokens) + " tokens, and this "
                   "model's maximum context length is " + std::to_string(contextLen) +
                   " tokens (prompt and completion)",
                   promptField, "context_length_exceeded");
  if (params.maxTokens == -1) // chat without max_tokens: what the context has left
    params.maxTokens = contextLen - promptTokens;
  if (!fitsContext(promptTokens, params.maxTokens, contextLen))
    return invalid("this model's maximum context length is " + std::to_string(contextLen) +
                       " tokens, but " +
                       std::to_string(tokensNeeded(promptTokens, params.maxTokens)) +
                       " were requested (" + std::to_string(promptTokens) +
                       " in the prompt, " + std::to_string(params.maxTokens) +
                       " max_tokens for the completion)",
                   "max_tokens", "context_length_exceeded");
  if (std::string bad = checkAgainstModel(params, context.spec->vocab); !bad.empty())
    return invalid(bad, bad.substr(7, bad.find('\'', 7) - 7)); // "field 'x'..." names x
  // What the answer holds at once, bounded: a whole response's choices' generated tokens'
  // entries, each the chosen token and its top ones (a stream's go chunk by chunk), the
  // echoed prompt's (each choice's), and prompt_logprobs (each choice of a completion
  // carries it, a chat completion once). Each factor is bounded (n 16, tokens the context,
  // top 20), so the sum cannot wrap.
  int64_t each = params.logprobs >= 0 ? params.logprobs + 1 : 0;
  int64_t prompts = request.promptLogprobs >= 0 ? promptTokens * (request.promptLogprobs + 1) : 0;
  int64_t entries =
      request.n * ((request.stream ? 0 : params.maxTokens * each) +
                   (params.echo ? promptTokens * each : 0) + (chat ? 0 : prompts)) +
      (chat ? prompts : 0);
  if (entries > kMaxLogprobEntries)
    return invalid("the log-probabilities asked for come to " + std::to_string(entries) +
                       " entries (n x (max_tokens, unless streamed, and echoed prompt tokens x "
                       "(logprobs + 1) + prompt tokens x (prompt_logprobs + 1))), more than the "
                       "limit of " +
                       std::to_string(kMaxLogprobEntries) +
                       "; ask for fewer choices, tokens or most likely tokens",
                   params.logprobs >= 0 ? "logprobs" : "prompt_logprobs");
  return std::nullopt;
}

nlohmann::ordered_json modelList(const ApiContext &context, int64_t created) {
  nlohmann::ordered_json model = {{"id", context.modelName},
                                  {"object", "model"},
                                  {"created", created},
                                  {"owned_by", "tpc"},
                                  {"max_model_len", context.defaults->maxSeqLen}};
  return {{"object", "list"}, {"data", nlohmann::ordered_json::array({model})}};
}

namespace {

nlohmann::ordered_json head(const ResponseHead &h, const char *object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

nlohmann::ordered_json usageOf(const Usage &u) {
  return {{"prompt_tokens", u.prompt},
          {"completion_tokens", u.completion},
          {"total_tokens", u.prompt + u.completion},
          {"prompt_tokens_details", {{"cached_tokens", u.cached}}}};
}

nlohmann::ordered_json reason(const char *finishReason) {
  return finishReason ? nlohmann::ordered_json(finishReason) : nlohmann::ordered_json();
}

} // namespace

nlohmann::ordered_json logprobsOf(bool chat, const Tokenizer &tokenizer,
                                  const TokenLogprobs *begin, const TokenLogprobs *end,
                                  int64_t &textOffset) {
  auto textOf = [&](int64_t id) { return tokenizer.decode({id}, /*skipSpecial=*/false); };
  auto clamped = [](double logprob) { return std::max(logprob, -9999.0); };
  if (chat) {
    nlohmann::ordered_json content = nlohmann::ordered_json::array();
    auto entry = [&](int64_t id, double logprob) {
      std::string text = textOf(id);
      std::vector<int> bytes;
      for (unsigned char c : text)
        bytes.push_back(c);
      return nlohmann::ordered_json{{"token", text}, {"logprob", clamped(logprob)},
                                    {"bytes", bytes}};
    };
    for (const TokenLogprobs *t = begin; t != end; ++t) {
      nlohmann::ordered_json one = entry(t->token, t->logprob);
      one["top_logprobs"] = nlohmann::ordered_json::array();
      for (const auto &[id, logprob] : t->top)
        one["top_logprobs"].push_back(entry(id, logprob));
      content.push_back(std::move(one));
    }
    return {{"content", std::move(content)}};
  }
  nlohmann::ordered_json offsets = nlohmann::ordered_json::array(),
                         chosen = nlohmann::ordered_json::array(),
                         tokens = nlohmann::ordered_json::array(),
                         tops = nlohmann::ordered_json::array();
  for (const TokenLogprobs *t = begin; t != end; ++t) {
    std::string text = textOf(t->token);
    offsets.push_back(textOffset);
    textOffset += int64_t(std::count_if(text.begin(), text.end(), [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0) != 0x80; // a character's first byte
    }));
    chosen.push_back(clamped(t->logprob));
    tokens.push_back(text);
    nlohmann::ordered_json top = nlohmann::ordered_json::object();
    for (const auto &[id, logprob] : t->top)
      top[textOf(id)] = clamped(logprob);
    top[text] = clamped(t->logprob); // the chosen one too, as OpenAI's and vLLM's give it
    tops.push_back(std::move(top));
  }
  return {{"text_offset", std::move(offsets)},
          {"token_logprobs", std::move(chosen)},
          {"tokens", std::move(tokens)},
          {"top_logprobs", std::move(tops)}};
}

nlohmann::ordered_json echoLogprobs(const Tokenizer &tokenizer, const std::vector<int64_t> &prompt,
                                    const std::vector<TokenLogprobs> &scored, int top,
                                    int64_t &textOffset) {
  std::vector<TokenLogprobs> mine(scored.begin(), scored.end());
  for (TokenLogprobs &t : mine) // (scored with as many as prompt_logprobs asks, maybe more)
    t.top.resize(std::min(t.top.size(), size_t(std::max(top, 0))));
  // The first token has nothing before it: its logprob and top null, as OpenAI gives it. (A
  // prompt is never empty: readPrompt.)
  TokenLogprobs none{prompt.front(), 0.0, {}};
  nlohmann::ordered_json first = logprobsOf(false, tokenizer, &none, &none + 1, textOffset);
  first["token_logprobs"][0] = nullptr;
  first["top_logprobs"][0] = nullptr;
  appendLogprobs(first, logprobsOf(false, tokenizer, mine.data(), mine.data() + mine.size(),
                                   textOffset));
  return first;
}

void appendLogprobs(nlohmann::ordered_json &into, const nlohmann::ordered_json &more) {
  if (into.is_null()) {
    into = more;
    return;
  }
  if (more.is_null())
    return;
  for (auto &[key, list] : into.items())
    for (const auto &item : more[key])
      list.push_back(item);
}

nlohmann::ordered_json promptLogprobsOf(const Tokenizer &tokenizer,
                                        const std::vector<TokenLogprobs> &scored, int top) {
  auto entry = [&](double logprob, int64_t rank, int64_t id) {
    return nlohmann::ordered_json{{"logprob", std::max(logprob, -9999.0)},
                                  {"rank", rank},
                                  {"decoded_token", tokenizer.decode({id}, false)}};
  };
  nlohmann::ordered_json all = nlohmann::ordered_json::array({nullptr});
  for (const TokenLogprobs &t : scored) {
    nlohmann::ordered_json one = nlohmann::ordered_json::object();
    one[std::to_string(t.token)] = entry(t.logprob, t.rank, t.token);
    for (size_t i = 0; i < t.top.size() && i < size_t(std::max(top, 0)); ++i) {
      auto [id, logprob] = t.top[i];
      if (id != t.token)
        one[std::to_string(id)] = entry(logprob, int64_t(i) + 1, id);
    }
    all.push_back(std::move(one));
  }
  return all;
}

nlohmann::ordered_json response(const ResponseHead &h, const std::vector<ChoiceResult> &choices,
                                const Usage &usage,
                                const nlohmann::ordered_json &promptLogprobs) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult &c = choices[i];
    nlohmann::ordered_json choice = {{"index", i}};
    if (h.chat && c.toolCalls.empty()) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else if (h.chat) {
      nlohmann::ordered_json calls = nlohmann::ordered_json::array();
      for (size_t k = 0; k < c.toolCalls.size(); ++k)
        calls.push_back({{"id", toolCallId(h.id, int64_t(i), int64_t(k))},
                         {"type", "function"},
                         {"function", {{"name", c.toolCalls[k].name},
                                       {"arguments", c.toolCalls[k].arguments}}}});
      nlohmann::ordered_json message = {{"role", "assistant"}};
      message["content"] = c.text.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(c.text);
      message["tool_calls"] = std::move(calls);
      choice["message"] = std::move(message);
    } else

      choice["text"] = c.text;
    choice["logprobs"] = c.logprobs;
    choice["finish_reason"] = reason(c.finishReason);
    if (!promptLogprobs.is_null() && !h.chat) // vLLM's places: a completion's choice's
      choice["prompt_logprobs"] = promptLogprobs;
    all.push_back(std::move(choice));
  }
  nlohmann::ordered_json r = head(h, h.chat ? "chat.completion" : "text_completion");
  r["choices"] = std::move(all);
  if (!promptLogprobs.is_null() && h.chat) // a chat completion's own
    r["prompt_logprobs"] = promptLogprobs;
  r["usage"] = usageOf(usage);
  return r;
}

nlohmann::ordered_json chunk(const ResponseHead &h, const std::string &text,
                             const char *finishReason, bool role,
                             const nlohmann::ordered_json &logprobs, int64_t index) {
  nlohmann::ordered_json choice = {{"index", index}};
  if (h.chat) {
    choice["delta"] = role ? nlohmann::ordered_json{{"role", "assistant"}, {"content", text}}
                           : nlohmann::ordered_json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = reason(finishReason);
  nlohmann::ordered_json r = head(h, h.chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = nlohmann::ordered_json::array({choice});
  return r;
}

std::string toolCallId(const std::string &responseId, int64_t choice, int64_t call) {
  uint64_t h = 1469598103934665603ull; // FNV-1a, 64 bits
  for (char c : responseId + "/" + std::to_string(choice) + "/" + std::to_string(call))
    h = (h ^ uint8_t(c)) * 1099511628211ull;
  static const char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int k = 0; k < 9; ++k, h /= 62)
    id += kAlphabet[h % 62];
  return id;
}

nlohmann::ordered_json toolChunk(const ResponseHead &h, const std::vector<ToolCallDelta> &calls,
                                 const nlohmann::ordered_json &logprobs, int64_t index) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ToolCallDelta &d : calls) {
    nlohmann::ordered_json call = {{"index", d.index}};
    if (!d.name.empty()) {
      call["id"] = toolCallId(h.id, index, d.index);
      call["type"] = "function";
      call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
      call["function"] = {{"arguments", d.arguments}};
    }
    list.push_back(std::move(call));
  }
  nlohmann::ordered_json choice = {{"index", index}};
  choice["delta"] = {{"tool_calls", std::move(list)}};
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = nullptr;
  nlohmann::ordered_json r = head(h, "chat.completion.chunk");
  r["choices"] = nlohmann::ordered_json::array({choice});
  return r;
}

nlohmann::ordered_json usageChunk(const ResponseHead &h, const Usage &usage) {
  nlohmann::ordered_json r = head(h, h.chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = nlohmann::ordered_json::array();
  r["usage"] = usageOf(usage);
  return r;
}

} // namespace tpcrt::serve
