// The model.mlir text under construction. It is written by hand rather than printed from
// built IR so that it reads like the example: named values, one comment per layer.
#include "ImporterBase.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace tpc::import::detail {

std::string f64(double v) { return llvm::formatv("{0:e17} : f64", v).str(); }

std::string Writer::type(std::vector<int64_t> dims) {
  std::string s = "tensor<";
  for (int64_t d : dims)
    s += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
  return s + "f32>";
}

std::string Writer::weight(const std::string &name, std::vector<int64_t> shape,
                           std::vector<std::string> sources) {
  if (sources.empty() && !renameFrom.empty() && llvm::StringRef(name).starts_with(renameFrom))
    sources.push_back(renameTo + name.substr(renameFrom.size()));
  if (!declared.count(name)) {
    declared.insert(name);
    uint64_t elements = 1;
    bool overflow = false;
    for (int64_t d : shape)
      overflow |= __builtin_mul_overflow(elements, uint64_t(d), &elements);
    if ((overflow || elements > kMaxParamElements) && oversized.empty())
      oversized = name + " " + type(shape);
    params << "  tp.param @\"" << name << "\"";
    // The checkpoint's type, by the tensor's name or (stacked) its first piece's.
    std::string storage;
    if (stored) {
      auto it = stored->find(sources.empty() ? name : sources.front());
      if (it != stored->end())
        storage = it->second;
    }
    std::vector<std::string> attrs;
    if (!sources.empty()) {
      std::string list = "sources = [";
      for (size_t i = 0; i < sources.size(); ++i)
        list += (i ? ", \"" : "\"") + sources[i] + "\"";
      attrs.push_back(list + "]");
    }
    if (!storage.empty())
      attrs.push_back("storage = #tp.storage<" + storage + ">");
    for (size_t i = 0; i < attrs.size(); ++i)
      params << (i ? ", " : " {") << attrs[i];
    if (!attrs.empty())
      params << "}";
    params << " : " << type(shape) << "\n";
  }
  std::string value = "%w" + std::to_string(++weights);
  body << "    " << value << " = tp.weight @\"" << name << "\" : " << type(shape) << "\n";
  shapes[value] = type(shape);
  return value;
}

std::string Writer::op(const std::string &name, const std::string &opName,
                       const std::string &module, std::vector<std::string> operands,
                       const std::string &attrs, const std::string &result) {
  std::string value = "%" + name;
  body << "    " << value << " = tp." << opName << " \"" << module << "\" "
       << llvm::join(operands, ", ");
  if (!attrs.empty())
    body << " {" << attrs << "}";
  body << " : (";
  std::vector<std::string> types;
  for (const std::string &v : operands)
    types.push_back(shapes.at(v));
  body << llvm::join(types, ", ") << ") -> " << result << "\n";
  shapes[value] = result;
  return value;
}

} // namespace tpc::import::detail
