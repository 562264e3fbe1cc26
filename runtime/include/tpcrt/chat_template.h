// A checkpoint's chat template, rendered as transformers' apply_chat_template does (for
// `tpc run --chat`): the subset of Jinja that real chat templates use, in plain C++17, since
// no C++ Jinja engine is packaged in Debian. Anything outside the subset is an error that
// names the construct and its line, never a silent difference.
//
// A template comes from a downloaded checkpoint and the messages from whoever sends a prompt:
// both are untrusted. Rendering validates its inputs and is bounded by ChatTemplateLimits, so
// that no template or message can crash, hang or exhaust memory: it is an error instead.
#ifndef TPCRT_CHAT_TEMPLATE_H
#define TPCRT_CHAT_TEMPLATE_H

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

struct ChatMessage {
  std::string role, content;
};

/// The checkpoint's chat template: DIR/chat_template.jinja, else tokenizer_config.json's
/// "chat_template" (a string, or a list of {name, template}: take "default"). Null with `error`
/// naming the file when there is none or it cannot be read.
std::optional<std::string> loadChatTemplate(const std::string &dir, std::string &error);

class GgufFile;
/// A GGUF file's chat template: its metadata 'tokenizer.chat_template' (a string), where
/// transformers 5.17 takes it from (not the named tokenizer.chat_template.NAME ones). Null with
/// `error` naming the file and the key when it is absent or not a string. Rendering applies the
/// same ChatTemplateLimits as to a checkpoint directory's template.
std::optional<std::string> loadChatTemplateGguf(const GgufFile &file, std::string &error);

/// Bounds on the work and memory one rendering may take. The defaults are far above what real
/// templates need (a 1000-message conversation of 1.3 MB renders with every template in the
/// conformance tests within 7% of the steps and 9% of the text work), yet any template meets
/// one within half a second of an optimized build, and a few hundred megabytes. (Sanitizer and
/// fuzzing builds run text loops 10 to 40 times slower: a fuzzer passes smaller limits.)
/// Going over a limit is an error that names it, with the template line where one applies:
///   chat template line 3: more than 1000000 render steps (limit maxRenderSteps)
struct ChatTemplateLimits {
  /// The template's own size in bytes (its parse tree is proportional to it).
  uint64_t maxTemplateBytes = 1 << 20;
  /// Render steps: every expression evaluated, every loop iteration (counted across nested
  /// loops) and every item that building a list or dict, a filter, a comparison or printing a
  /// value visits. Bounds the render's time.
  uint64_t maxRenderSteps = 1'000'000;
  /// Bytes of text the render builds or scans: concatenation, filters and methods, slicing,
  /// searching, printing values and the output itself. Bounds the time and memory text takes.
  uint64_t maxTextWork = 64 << 20;
  /// Bytes of the rendered text.
  uint64_t maxOutputBytes = 64 << 20;
  /// Bytes of any one string the template builds.
  uint64_t maxStringBytes = 16 << 20;
  /// Items of any one list, dict or namespace the template builds (and characters of a string
  /// it iterates).
  uint64_t maxItems = 1'000'000;
  /// Levels of nesting of the template's blocks and expressions (brackets, operands, 'not's
  /// and signs, which parsing and rendering recurse into) and of the values it builds and
  /// prints (lists in lists, ...). At most 500, which needs up to 6.5 MB of stack in a
  /// sanitizer build (the default 200 needs 2.6 MB there, under 0.5 MB in an optimized one).
  int maxNesting = 200;
};

struct ChatOptions {
  bool addGenerationPrompt = true;
  std::string bosToken, eosToken;
  ChatTemplateLimits limits;
};

/// Renders as transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt)
/// does: Jinja with trim_blocks and lstrip_blocks. Null with `error` naming the construct (and
/// its line) for anything outside the subset, for raise_exception's message, for a limit
/// exceeded, and for an input that is not valid UTF-8 (naming it, e.g. messages[1].content,
/// and the offset of its first invalid byte). The text returned is valid UTF-8.
std::optional<std::string> renderChatTemplate(const std::string &source,
                                              const std::vector<ChatMessage> &messages,
                                              const ChatOptions &options, std::string &error);

/// The same, with the messages as JSON (each an object: role, content, and whatever else the
/// template reads: tool_calls, tool_call_id, name), and `tools` as
/// apply_chat_template(tools=...) takes them (a list of {"type": "function", "function": ...},
/// or null for none). Objects keep their key order, as Python's dicts do, so that `tojson`
/// writes them as transformers does. A string that is not UTF-8 is an error that names its
/// place (messages[2].tool_calls[0].function.name).
std::optional<std::string> renderChatTemplate(const std::string &source,
                                              const nlohmann::ordered_json &messages,
                                              const nlohmann::ordered_json &tools,
                                              const ChatOptions &options, std::string &error);

} // namespace tpcrt

#endif // TPCRT_CHAT_TEMPLATE_H
