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

} // namespace

std::optional<std::string> render(const std::string &source,
                                  const std::vector<ChatMessage> &messages,
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
  for (size_t k = 0; k < messages.size(); ++k)
    if (invalidInput("messages[" + std::to_string(k) + "].role", messages[k].role) ||
        invalidInput("messages[" + std::to_string(k) + "].content", messages[k].content))
      return std::nullopt;
  if (invalidInput("bos_token", options.bosToken) || invalidInput("eos_token", options.eosToken))
    return std::nullopt;
  try {
    std::vector<Node> tree = parse(lex(source), limits.maxNesting);
    List msgs;
    for (const ChatMessage &m : messages) {
      Dict d;
      d.set("role", Value::str(m.role));
      d.set("content", Value::str(m.content));
      msgs.push_back(Value::makeDict(std::move(d)));
    }
    // transformers passes tools and documents, None when not given: defined, and none.
    std::map<std::string, Value> globals = {
        {"messages", Value::makeList(std::move(msgs))},
        {"add_generation_prompt", Value::boolean(options.addGenerationPrompt)},
        {"bos_token", Value::str(options.bosToken)},
        {"eos_token", Value::str(options.eosToken)},
        {"tools", Value::none()},
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
