// tpc-chat: renders a chat template as tpcrt does, for the conformance test against
// transformers' apply_chat_template (test/conformance/chat-template.test).
//   tpc-chat TEMPLATE_FILE MESSAGES_JSON [--tools TOOLS_JSON] [--no-generation-prompt]
//            [--bos X] [--eos Y] [--limit NAME=N]...
// TEMPLATE_FILE may be a GGUF file (ending in .gguf): its metadata's tokenizer.chat_template.
// MESSAGES_JSON is a file holding [{"role": ..., "content": ...}, ...], each message as the
// template is to see it (tool_calls, tool_call_id, ...); TOOLS_JSON one holding the tools as
// apply_chat_template(tools=...) takes them. --limit sets one of
// ChatTemplateLimits (maxRenderSteps=1000, ...). The rendering goes to stdout as it is (no
// newline added); an error to stderr, exit 1.
#include "tpcrt/chat_template.h"
#include "tpcrt/file.h"
#include "tpcrt/gguf.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

static int usage() {
  std::fprintf(stderr, "usage: tpc-chat TEMPLATE_FILE MESSAGES_JSON [--tools TOOLS_JSON] "
                       "[--no-generation-prompt] [--bos X] [--eos Y] [--limit NAME=N]...\n");
  return 2;
}

// NAME=N into the limit it names; false for an unknown name or a value that is not a number.
static bool setLimit(tpcrt::ChatTemplateLimits &limits, const std::string &arg) {
  size_t eq = arg.find('=');
  std::string name = arg.substr(0, eq == std::string::npos ? 0 : eq);
  std::string digits = eq == std::string::npos ? "" : arg.substr(eq + 1);
  if (digits.empty() || digits.size() > 19 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  uint64_t n = std::stoull(digits);
  if (name == "maxNesting") {
    if (n > 1000000)
      return false;
    limits.maxNesting = int(n);
    return true;
  }
  uint64_t *field = name == "maxTemplateBytes" ? &limits.maxTemplateBytes
                    : name == "maxRenderSteps" ? &limits.maxRenderSteps
                    : name == "maxTextWork"    ? &limits.maxTextWork
                    : name == "maxOutputBytes" ? &limits.maxOutputBytes
                    : name == "maxStringBytes" ? &limits.maxStringBytes
                    : name == "maxItems"       ? &limits.maxItems
                                               : nullptr;
  if (field)
    *field = n;
  return field != nullptr;
}

int main(int argc, char **argv) {
  std::vector<const char *> positional;
  const char *toolsPath = nullptr;
  tpcrt::ChatOptions options;
  for (int k = 1; k < argc; ++k) {
    if (!std::strcmp(argv[k], "--no-generation-prompt"))
      options.addGenerationPrompt = false;
    else if (!std::strcmp(argv[k], "--bos") && k + 1 < argc)
      options.bosToken = argv[++k];
    else if (!std::strcmp(argv[k], "--eos") && k + 1 < argc)
      options.eosToken = argv[++k];
    else if (!std::strcmp(argv[k], "--tools") && k + 1 < argc)
      toolsPath = argv[++k];
    else if (!std::strcmp(argv[k], "--limit") && k + 1 < argc) {
      if (!setLimit(options.limits, argv[++k])) {
        std::fprintf(stderr,
                     "tpc-chat: error: --limit %s: expected NAME=N with NAME one of "
                     "ChatTemplateLimits' fields\n",
                     argv[k]);
        return 2;
      }
    } else if (argv[k][0] == '-' && argv[k][1] != '\0')
      return usage();
    else
      positional.push_back(argv[k]);
  }
  if (positional.size() != 2)
    return usage();
  std::string source, error;
  std::string templatePath = positional[0];
  if (templatePath.size() > 5 && templatePath.compare(templatePath.size() - 5, 5, ".gguf") == 0) {
    std::unique_ptr<tpcrt::GgufFile> file = tpcrt::GgufFile::open(templatePath, error);
    std::optional<std::string> fromGguf;
    if (file)
      fromGguf = tpcrt::loadChatTemplateGguf(*file, error);
    if (!fromGguf) {
      std::fprintf(stderr, "tpc-chat: error: %s\n", error.c_str());
      return 1;
    }
    source = std::move(*fromGguf);
  } else if (!tpcrt::readFile(positional[0], source)) {
    std::fprintf(stderr, "tpc-chat: error: cannot read %s\n", positional[0]);
    return 1;
  }
  // Parsed with their keys in order, as Python's json gives the template its dicts.
  auto readJson = [&](const char *path, nlohmann::ordered_json &into) {
    std::string text;
    if (!tpcrt::readFile(path, text)) {
      std::fprintf(stderr, "tpc-chat: error: cannot read %s\n", path);
      return false;
    }
    try {
      into = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception &e) {
      std::fprintf(stderr, "tpc-chat: error: %s: %s\n", path, e.what());
      return false;
    }
    return true;
  };
  nlohmann::ordered_json messages, tools;
  if (!readJson(positional[1], messages) || (toolsPath && !readJson(toolsPath, tools)))
    return 1;
  std::optional<std::string> text =
      tpcrt::renderChatTemplate(source, messages, tools, options, error);
  if (!text) {
    std::fprintf(stderr, "tpc-chat: error: %s\n", error.c_str());
    return 1;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}
