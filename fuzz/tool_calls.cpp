// Fuzzes the tool-call reader of tpc serve's answers (runtime/serve/tool_calls.h): a model's
// output read whole (parseToolCalls) and as a stream (ToolCallStream). The input's first byte
// chooses the format (byte % 5) and how the stream is split (byte / 5, the seed); the rest is
// the output. The seeds in fuzz/corpus/tool_calls/ begin with a letter:
//   A F K P U  Hermes       B G L Q V  Llama3Json     C H M R W  Mistral
//   D I N S X  JsonList     E J O T Y  Named (the function is "get_weather")
// The oracle does not parse calls itself; it holds the reader to what its header promises:
// - nothing throws; malformed output is an error with no calls and the whole text as content;
// - every call has a name (Named's is the function asked for) and arguments that are a JSON
//   object; the content is a beginning of the text, verbatim: all of it where Hermes or
//   Llama3Json output holds no call, what comes before the marker where Hermes or Mistral
//   output does, nothing where Llama3Json output does, and never any in JsonList and Named;
// - a stream, fed the output whole and in pieces of 1, 2, 3 and 7 bytes in turn (empty pieces
//   between them for some seeds), says what the whole read says: the same error, or the same
//   content and calls when its deltas are joined; each call's name comes on its first delta
//   only, calls come in order (an index goes up by at most 1), and nothing comes after
//   finish(). Where the output is malformed, what the stream sent of content is a beginning
//   of the text, and all of it where no call went out.
#include "tool_calls.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using tpcrt::serve::ParsedOutput;
using tpcrt::serve::StreamDelta;
using tpcrt::serve::ToolCall;
using tpcrt::serve::ToolCallDelta;
using tpcrt::serve::ToolCallStream;
using tpcrt::serve::ToolFormat;

const std::string kFunction = "get_weather";

void check(bool ok) {
  if (!ok)
    __builtin_trap();
}

bool startsWith(const std::string &text, const std::string &prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

/// What a stream sent, joined as a client joins it.
struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
  std::string error;
};

/// Feeds `text` to a stream in pieces of the given lengths (cycled; 0: the whole text in one
/// piece), an empty piece before each where `empties`, and checks each delta as it comes.
Streamed stream(ToolFormat format, const std::string &text, const std::vector<size_t> &lengths,
                bool empties) {
  ToolCallStream s(format, kFunction);
  Streamed got;
  int last = -1; // the index of the last call that came
  auto take = [&](const StreamDelta &delta) {
    got.content += delta.content;
    int previous = -1; // within one delta: one entry per call, in index order
    for (const ToolCallDelta &call : delta.calls) {
      check(call.index > previous && (call.index == last || call.index == last + 1));
      previous = call.index;
      bool first = call.index == last + 1;
      // the name whole, on the call's first delta and on no other
      check(first ? !call.name.empty() : call.name.empty());
      if (first)
        got.calls.push_back({call.name, ""});
      got.calls.back().arguments += call.arguments;
      last = call.index;
    }
  };
  size_t at = 0;
  for (size_t piece = 0; at < text.size(); ++piece) {
    if (empties)
      take(s.feed(""));
    size_t length = lengths[piece % lengths.size()];
    if (length == 0)
      length = text.size();
    take(s.feed(text.substr(at, length)));
    at += length;
  }
  take(s.finish());
  got.error = s.error();
  // Ended: nothing more comes, and the verdict stays.
  check(s.feed("{").empty() && s.finish().empty() && s.error() == got.error);
  return got;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  static const ToolFormat kFormats[] = {ToolFormat::Hermes, ToolFormat::Llama3Json,
                                        ToolFormat::Mistral, ToolFormat::JsonList,
                                        ToolFormat::Named};
  ToolFormat format = kFormats[data[0] % 5];
  unsigned seed = data[0] / 5;
  std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);

  ParsedOutput parsed;
  try {
    parsed = tpcrt::serve::parseToolCalls(format, text, kFunction);
  } catch (...) {
    __builtin_trap(); // malformed output is an error, never an exception
  }
  if (!parsed.error.empty()) {
    check(parsed.calls.empty() && parsed.content == text);
  } else {
    for (const ToolCall &call : parsed.calls) {
      check(!call.name.empty() && nlohmann::json::accept(call.arguments) &&
            nlohmann::json::parse(call.arguments).is_object());
    }
    check(startsWith(text, parsed.content));
    if (format == ToolFormat::Named)
      check(parsed.calls.size() == 1 && parsed.calls[0].name == kFunction);
    if (format == ToolFormat::Named || format == ToolFormat::JsonList)
      check(parsed.content.empty());
    if (parsed.calls.empty() && (format == ToolFormat::Hermes || format == ToolFormat::Llama3Json))
      check(parsed.content == text); // no marker, or not a call: all of it is content
    if (!parsed.calls.empty()) { // the content ends where the calls begin
      std::string rest = text.substr(parsed.content.size());
      check(format == ToolFormat::Hermes    ? startsWith(rest, "<tool_call>")
            : format == ToolFormat::Mistral ? startsWith(rest, "[TOOL_CALLS]")
                                            : parsed.content.empty());
    }
  }

  // The same output whole, and in pieces whose lengths cycle from a place the seed picks.
  static const size_t kLengths[] = {1, 2, 3, 7};
  std::vector<size_t> pieces;
  for (size_t i = 0; i < 4; ++i)
    pieces.push_back(kLengths[(seed + i) % 4]);
  for (const Streamed &got : {stream(format, text, {0}, false),
                              stream(format, text, pieces, (seed >> 2) & 1)}) {
    check(got.error == parsed.error); // the same place, however the bytes came
    check(startsWith(text, got.content));
    if (!got.error.empty()) {
      if (got.calls.empty())
        check(got.content == text); // nothing of the calls went out: it all fell back
      continue;
    }
    check(got.content == parsed.content && got.calls.size() == parsed.calls.size());
    for (size_t i = 0; i < got.calls.size(); ++i)
      check(got.calls[i].name == parsed.calls[i].name &&
            got.calls[i].arguments == parsed.calls[i].arguments);
  }
  return 0;
}
