// JSON reading for plans, custom strategies and configs, with line:col locations: nlohmann
// parses, and a small scan of the (already valid) text finds where each key was written.
// These files come from users: nesting is bounded before parsing (nlohmann parses without
// recursion, but copying or printing a value recurses once per level), a number out of
// range and a key given twice in one object are errors at their place.
#include "tpc/Plan/Json.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;
using namespace tpc::plan;

/// Far deeper than any plan or config.json (they nest 3 or 4 levels), far shallower than a
/// recursion that could exhaust the stack.
static constexpr size_t kMaxJsonDepth = 128;

/// The offset of the first bracket that opens level kMaxJsonDepth + 1; npos when none does.
static size_t tooDeepAt(StringRef text) {
  size_t depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        return i;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return StringRef::npos;
}

FailureOr<JsonDocument> JsonDocument::read(StringRef path, MLIRContext *context) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    emitError(FileLineColLoc::get(context, path, 0, 0))
        << "cannot read " << path << ": " << buffer.getError().message();
    return failure();
  }
  return parse(path, (*buffer)->getBuffer().str(), context);
}

FailureOr<JsonDocument> JsonDocument::parse(StringRef path, std::string text,
                                            MLIRContext *context) {
  JsonDocument doc;
  doc.filePath = path.str();
  doc.text = std::move(text);
  doc.context = context;
  // nlohmann's parser ends a document at a NUL byte, silently, whatever follows it: what
  // follows would then be neither checked nor read.
  if (size_t at = doc.text.find('\0'); at != std::string::npos) {
    emitError(doc.locAt(at)) << "malformed JSON: a NUL byte";
    return failure();
  }
  if (size_t at = tooDeepAt(doc.text); at != StringRef::npos) {
    emitError(doc.locAt(at)) << "malformed JSON: nested deeper than " << kMaxJsonDepth << " levels";
    return failure();
  }
  try {
    doc.root = nlohmann::ordered_json::parse(doc.text);
  } catch (const nlohmann::json::out_of_range &e) {
    // A number that does not fit a double (1e400): nlohmann names it but not where it is.
    std::string what = e.what();
    size_t open = what.find('\''), close = what.rfind('\'');
    std::string number =
        open != std::string::npos && close > open ? what.substr(open + 1, close - open - 1) : "";
    size_t at = number.empty() ? 0 : doc.text.find(number);
    emitError(doc.locAt(at == std::string::npos ? 0 : at))
        << "malformed JSON: the number " << number << " is out of range";
    return failure();
  } catch (const nlohmann::json::parse_error &e) {
    // nlohmann's message repeats the position; keep only what went wrong.
    std::string what = e.what();
    size_t column = what.find("column ");
    size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
    std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
    // It quotes the text it read last, which may be the invalid UTF-8 it stopped at: say
    // those bytes in hex rather than pass them on to the terminal.
    std::string printable;
    for (unsigned char c : reason)
      printable += c < 0x80 && (c >= 0x20 || c == '\t') ? std::string(1, char(c))
                                                        : llvm::formatv("\\x{0:x-2}", c).str();
    size_t offset = e.byte == 0 ? 0 : e.byte - 1;
    emitError(doc.locAt(std::min(offset, doc.text.size()))) << "malformed JSON: " << printable;
    return failure();
  }
  doc.indexKeys();
  // Python's json would keep the later entry silently; a key written twice is a mistake
  // either way, and which entry was meant is anyone's guess.
  if (!doc.duplicateKeys.empty()) {
    for (const auto &[path, later, first] : doc.duplicateKeys) {
      InFlightDiagnostic diag = emitError(doc.locAt(later))
                                << "key '" << path.back() << "' is given twice";
      if (path.size() > 1)
        diag << " in '" << path[path.size() - 2] << "'";
      diag << "; a key may appear once in an object";
      diag.attachNote(doc.locAt(first)) << "its first entry";
    }
    return failure();
  }
  return doc;
}

Location JsonDocument::locAt(size_t offset) const {
  unsigned line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return FileLineColLoc::get(context, filePath, line, column);
}

Location JsonDocument::keyLoc(const std::vector<std::string> &keyPath) const {
  auto it = keyOffsets.find(keyPath);
  return locAt(it == keyOffsets.end() ? 0 : it->second);
}

void JsonDocument::indexKeys() {
  // The text already parsed, so the scan only tracks nesting and which strings are keys.
  struct Frame {
    bool object;
    bool expectKey;
    size_t index;
  };
  std::vector<Frame> frames;
  std::vector<std::string> path;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t start = i;
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      if (frames.empty() || !frames.back().object || !frames.back().expectKey)
        continue;
      frames.back().expectKey = false;
      std::string key = nlohmann::json::parse(text.substr(start, i - start + 1)).get<std::string>();
      path.resize(frames.size() - 1);
      path.push_back(key);
      auto [it, inserted] = keyOffsets.emplace(path, start);
      if (!inserted)
        duplicateKeys.push_back({path, start, it->second});
    } else if (c == '{' || c == '[') {
      if (!frames.empty() && !frames.back().object) {
        path.resize(frames.size() - 1);
        path.push_back(std::to_string(frames.back().index));
      }
      frames.push_back({c == '{', c == '{', 0});
    } else if (c == '}' || c == ']') {
      frames.pop_back();
      path.resize(frames.size());
    } else if (c == ',' && !frames.empty()) {
      if (frames.back().object)
        frames.back().expectKey = true;
      else
        ++frames.back().index;
    }
  }
}

std::string tpc::plan::describeJsonType(const nlohmann::ordered_json &value) {
  switch (value.type()) {
  case nlohmann::ordered_json::value_t::null: return "null";
  case nlohmann::ordered_json::value_t::object: return "an object";
  case nlohmann::ordered_json::value_t::array: return "an array";
  case nlohmann::ordered_json::value_t::string: return "a string";
  case nlohmann::ordered_json::value_t::boolean: return "a boolean";
  default: return "a number";
  }
}
