// The Jinja interpreter behind renderChatTemplate (jinja.cpp): internal to libtpcrt.
#ifndef TPCRT_CHAT_JINJA_H
#define TPCRT_CHAT_JINJA_H

#include "tpcrt/chat_template.h"

#include <nlohmann/json_fwd.hpp>

namespace tpcrt::jinja {

/// Renders `source` with messages and tools (a list, or null for none) as Python holds the
/// JSON they come from, add_generation_prompt, bos_token, eos_token and documents set to none,
/// as transformers' render_jinja_template does.
std::optional<std::string> render(const std::string &source,
                                  const nlohmann::ordered_json &messages,
                                  const nlohmann::ordered_json &tools,
                                  const ChatOptions &options, std::string &error);

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_H
