// JSON reading for plans, custom strategies and configs, with line:col locations: nlohmann
// parses, and a small scan of the (already valid) text finds where each key was written.
#include "tpc/Plan/Json.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;
using namespace tpc::plan;

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
  try {
    doc.root = nlohmann::ordered_json::parse(doc.text);
  } catch (const nlohmann::json::parse_error &e) {
    // nlohmann's message repeats the position; keep only what went wrong.
    std::string what = e.what();
    size_t column = what.find("column ");
    size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
    std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
    size_t offset = e.byte == 0 ? 0 : e.byte - 1;
    emitError(doc.locAt(std::min(offset, doc.text.size()))) << "malformed JSON: " << reason;
    return failure();
  }
  doc.indexKeys();
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
      if (!inserted) {
        it->second = start; // like Python's json, the later key wins
        duplicateKeys.emplace_back(path, locAt(start));
      }
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
