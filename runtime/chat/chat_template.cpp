// Finding a checkpoint's chat template, where transformers 5 looks for it.
#include "tpcrt/chat_template.h"

#include "jinja.h"
#include "tpcrt/file.h"
#include "tpcrt/gguf.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

namespace tpcrt {

namespace {

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

} // namespace

std::optional<std::string> loadChatTemplate(const std::string &dir, std::string &error) {
  std::string jinjaPath = dir + "/chat_template.jinja";
  std::string text;
  if (exists(jinjaPath)) {
    if (!readFile(jinjaPath, text)) {
      error = jinjaPath + ": cannot be read";
      return std::nullopt;
    }
    return text;
  }
  std::string configPath = dir + "/tokenizer_config.json";
  if (!exists(configPath)) {
    error = "no chat template in " + dir + ": neither chat_template.jinja nor " +
            "tokenizer_config.json is there";
    return std::nullopt;
  }
  if (!readFile(configPath, text)) {
    error = configPath + ": cannot be read";
    return std::nullopt;
  }
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    error = configPath + ": not valid JSON (" + e.what() + ")";
    return std::nullopt;
  }
  auto found = config.is_object() ? config.find("chat_template") : config.end();
  if (found == config.end() || found->is_null()) {
    error = configPath + ": no \"chat_template\" (and no chat_template.jinja beside it)";
    return std::nullopt;
  }
  if (found->is_string())
    return found->get<std::string>();
  if (found->is_array()) {
    for (const auto &entry : *found) {
      if (entry.is_object() && entry.value("name", nlohmann::json()) == "default" &&
          entry.contains("template") && entry["template"].is_string())
        return entry["template"].get<std::string>();
    }
    error = configPath + ": \"chat_template\" is a list with no {\"name\": \"default\"} template";
    return std::nullopt;
  }
  error = configPath + ": \"chat_template\" is neither a string nor a list of templates";
  return std::nullopt;
}

std::optional<std::string> loadChatTemplateGguf(const GgufFile &file, std::string &error) {
  std::string text;
  if (!file.getString("tokenizer.chat_template", text, error))
    return std::nullopt;
  return text;
}

std::optional<std::string> renderChatTemplate(const std::string &source,
                                              const std::vector<ChatMessage> &messages,
                                              const ChatOptions &options, std::string &error) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage &m : messages)
    list.push_back({{"role", m.role}, {"content", m.content}});
  return jinja::render(source, list, nullptr, options, error);
}

std::optional<std::string> renderChatTemplate(const std::string &source,
                                              const nlohmann::ordered_json &messages,
                                              const nlohmann::ordered_json &tools,
                                              const ChatOptions &options, std::string &error) {
  return jinja::render(source, messages, tools, options, error);
}

} // namespace tpcrt
