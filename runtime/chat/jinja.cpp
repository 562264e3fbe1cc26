// The Jinja subset behind renderChatTemplate: its inputs checked, then the template lexed
// (jinja_lexer), parsed (jinja_parser) and rendered (jinja_render) with the globals
// transformers gives a chat template. What real chat templates use is there; anything else is
// an error naming the construct and its line, never output that differs silently.
//
// The template and the messages are untrusted: inputs must be valid UTF-8 and rendering is
// bounded by the caller's ChatTemplateLimits (jinja_render.h says how).
#include "jinja.h"

#include "jinja_lexer.h"
#include "jinja_parser.h"
#include "jinja_render.h"
#include "tpcrt/utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace tpcrt::jinja {
namespace {

// "NAME: not valid UTF-8 (...)" when `text` is not, naming its first invalid byte.
std::string utf8Problem(const std::string &text) {
  size_t at = firstInvalidUtf8(text);
  if (at == std::string::npos)
    return "";
  char buf[96];
  std::snprintf(buf, sizeof buf,
                "not valid UTF-8 (the byte at offset %zu, 0x%02x, begins no "
                "character)",
                at, unsigned((unsigned char)text[at]));
  return buf;
}

/// The template's value of a JSON input, as Python holds the json it was parsed from: objects
/// as dicts in their order, arrays as lists. False, with `error` naming the place (`at`), for
/// a string that is not UTF-8, an integer beyond 64 bits, or nesting deeper than `depth` more
/// levels (the template's own limit on the values it builds).
bool fromJson(const nlohmann::ordered_json &json, const std::string &at, int depth, Value &out,
              std::string &error) {
  if ((json.is_array() || json.is_object()) && depth <= 0) {
    error = at + ": nested deeper than the chat template's limit (maxNesting)";
    return false;
  }
  switch (json.type()) {
  case nlohmann::ordered_json::value_t::null:
    out = Value::none();
    return true;
  case nlohmann::ordered_json::value_t::boolean:
    out = Value::boolean(json.get<bool>());
    return true;
  case nlohmann::ordered_json::value_t::number_integer:
    out = Value::integer(json.get<int64_t>());
    return true;
  case nlohmann::ordered_json::value_t::number_unsigned:
    if (json.get<uint64_t>() > uint64_t(INT64_MAX)) {
      error = at + ": the integer " + json.dump() + " is beyond 64 bits";
      return false;
    }
    out = Value::integer(int64_t(json.get<uint64_t>()));
    return true;
  case nlohmann::ordered_json::value_t::number_float:
    out = Value::number(json.get<double>());
    return true;
  case nlohmann::ordered_json::value_t::string: {
    const std::string &text = json.get_ref<const std::string &>();
    if (std::string problem = utf8Problem(text); !problem.empty()) {
      error = at + ": " + problem;
      return false;
    }
    out = Value::str(text);
    return true;
  }
  case nlohmann::ordered_json::value_t::array: {
    List items;
    for (size_t k = 0; k < json.size(); ++k) {
      items.emplace_back();
      if (!fromJson(json[k], at + "[" + std::to_string(k) + "]", depth - 1, items.back(), error))
        return false;
    }
    out = Value::makeList(std::move(items));
    return true;
  }
  case nlohmann::ordered_json::value_t::object: {
    Dict entries;
    for (const auto &[key, value] : json.items()) {
      if (std::string problem = utf8Problem(key); !problem.empty()) {
        error = at + ": a key is " + problem;
        return false;
      }
      Value item;
      if (!fromJson(value, at + "." + key, depth - 1, item, error))
        return false;
      entries.set(key, std::move(item));
    }
    out = Value::makeDict(std::move(entries));
    return true;
  }
  default: // binary and discarded values come from no JSON text
    error = at + ": not a JSON value";
    return false;
  }
}

} // namespace

std::optional<std::string> render(const std::string &source,
                                  const nlohmann::ordered_json &messages,
                                  const nlohmann::ordered_json &tools,
                                  const ChatOptions &options, std::string &error) {
  const ChatTemplateLimits &limits = options.limits;
  if (limits.maxNesting < 1 || limits.maxNesting > kMaxNestingCeiling) {
    error = "ChatTemplateLimits::maxNesting is " + std::to_string(limits.maxNesting) +
            ": it must be from 1 to " + std::to_string(kMaxNestingCeiling);
    return std::nullopt;
  }
  if (source.size() > limits.maxTemplateBytes) {
    error = "the chat template is " + std::to_string(source.size()) + " bytes, more than " +
            std::to_string(limits.maxTemplateBytes) + " (limit maxTemplateBytes)";
    return std::nullopt;
  }
  // The template and every text given to it are UTF-8 (as Python's str is), so that what the
  // template makes of them is too.
  if (std::string problem = utf8Problem(source); !problem.empty()) {
    size_t at = firstInvalidUtf8(source);
    error = "chat template line " +
            std::to_string(1 + std::count(source.begin(), source.begin() + long(at), '\n')) + ": " +
            problem;
    return std::nullopt;
  }
  auto invalidInput = [&](const std::string &name, const std::string &text) {
    std::string problem = utf8Problem(text);
    if (!problem.empty())
      error = name + ": " + problem;
    return !problem.empty();
  };
  if (invalidInput("bos_token", options.bosToken) || invalidInput("eos_token", options.eosToken))
    return std::nullopt;
  if (!messages.is_array() || !(tools.is_null() || tools.is_array())) {
    error = !messages.is_array() ? "messages must be a list" : "tools must be a list or none";
    return std::nullopt;
  }
  // transformers passes tools and documents, None when not given: defined, and none.
  Value messageList, toolList;
  if (!fromJson(messages, "messages", limits.maxNesting, messageList, error) ||
      !fromJson(tools, "tools", limits.maxNesting, toolList, error))
    return std::nullopt;
  try {
    std::vector<Node> tree = parse(lex(source), limits.maxNesting);
    std::map<std::string, Value> globals = {
        {"messages", std::move(messageList)},
        {"add_generation_prompt", Value::boolean(options.addGenerationPrompt)},
        {"bos_token", Value::str(options.bosToken)},
        {"eos_token", Value::str(options.eosToken)},
        {"tools", std::move(toolList)},
        {"documents", Value::none()}};
    // Jinja's globals, and transformers' raise_exception and strftime_now.
    for (const char *fn : {"raise_exception", "strftime_now", "range", "namespace", "dict"})
      globals[fn] = Value::function(fn);
    Renderer r(std::move(globals), limits);
    r.exec(tree);
    return std::move(r.out);
  } catch (const TemplateError &e) {
    error = e.message;
  } catch (const Raised &e) {
    error = e.message;
  } catch (const std::exception &e) { // memory, mostly: a template that builds huge values
    error = std::string("chat template: ") + e.what();
  }
  return std::nullopt;
}

} // namespace tpcrt::jinja
