// Saying a fault repeated in every layer once (RepeatedDiagnostics.h).
#include "tpc/Dialect/TP/RepeatedDiagnostics.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <tuple>

using namespace mlir;
using namespace tpc::tp;

namespace {
bool isNameChar(char c) { return llvm::isAlnum(c) || c == '_'; }
} // namespace

LayerGeneric tpc::tp::layerGeneric(StringRef message) {
  LayerGeneric out;
  size_t n = message.size();
  for (size_t i = 0; i < n;) {
    // ".N" after a word ("layers.3", "h.3", not "1.5"), ending the name or followed by the
    // next component.
    bool afterWord = i > 0 && (llvm::isAlpha(message[i - 1]) || message[i - 1] == '_');
    if (message[i] == '.' && afterWord && i + 1 < n && llvm::isDigit(message[i + 1])) {
      size_t end = i + 1;
      while (end < n && llvm::isDigit(message[end]))
        ++end;
      if (end == n || !isNameChar(message[end])) {
        if (out.layer.empty()) {
          size_t start = i;
          while (start > 0 && (isNameChar(message[start - 1]) || message[start - 1] == '.'))
            --start;
          out.layer = message.slice(start, end).str();
        }
        out.message += ".*";
        i = end;
        continue;
      }
    }
    out.message += message[i++];
  }
  return out;
}

RepeatedDiagnosticHandler::RepeatedDiagnosticHandler(MLIRContext *context) : context(context) {
  id = context->getDiagEngine().registerHandler([this](Diagnostic &diag) {
    Held &h = held.emplace_back(Held{diag.getSeverity(), diag.getLocation(), diag.str(), {}});
    for (Diagnostic &note : diag.getNotes())
      h.notes.emplace_back(note.getLocation(), note.str());
    return success();
  });
}

RepeatedDiagnosticHandler::~RepeatedDiagnosticHandler() {
  // What is emitted now goes to the handlers registered before this one.
  context->getDiagEngine().eraseHandler(id);

  struct Group {
    size_t first;
    std::string generic;
    llvm::StringSet<> layers;
  };
  std::vector<Group> groups;
  // A message with no layer in it merges only with its exact repeats at one location.
  std::map<std::tuple<DiagnosticSeverity, std::string, const void *>, size_t> index;
  for (size_t i = 0; i < held.size(); ++i) {
    LayerGeneric generic = layerGeneric(held[i].message);
    const void *where = generic.layer.empty() ? held[i].loc.getAsOpaquePointer() : nullptr;
    auto [it, inserted] =
        index.try_emplace({held[i].severity, generic.message, where}, groups.size());
    if (inserted)
      groups.push_back({i, generic.message, {}});
    if (!generic.layer.empty())
      groups[it->second].layers.insert(generic.layer);
  }

  for (const Group &group : groups) {
    const Held &first = held[group.first];
    Diagnostic diag(first.loc, first.severity);
    if (group.layers.size() > 1)
      diag << "in " << group.layers.size() << " layers ("
           << layerGeneric(first.message).layer << " first): " << group.generic;
    else
      diag << first.message;
    for (const auto &[loc, text] : first.notes)
      diag.attachNote(loc) << text;
    context->getDiagEngine().emit(std::move(diag));
  }
}
