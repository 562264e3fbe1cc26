// Plan-key matching, kept free of MLIR so the unit tests exercise it directly.
#include "tpc/Plan/Matcher.h"

#include "llvm/ADT/StringExtras.h"

using namespace tpc::plan;

bool tpc::plan::matchesPattern(llvm::StringRef pattern, llvm::StringRef name) {
  while (!pattern.empty()) {
    if (pattern.front() != '*') {
      if (name.empty() || name.front() != pattern.front())
        return false;
      pattern = pattern.drop_front();
      name = name.drop_front();
      continue;
    }
    // `*` takes a whole run of digits: an index is never split between `*` and a literal.
    size_t digits = 0;
    while (digits < name.size() && llvm::isDigit(name[digits]))
      ++digits;
    if (digits == 0)
      return false;
    pattern = pattern.drop_front();
    name = name.drop_front(digits);
  }
  return name.empty();
}

std::string tpc::plan::genericName(llvm::StringRef name) {
  std::string result;
  for (size_t i = 0; i < name.size();) {
    if (llvm::isDigit(name[i])) {
      while (i < name.size() && llvm::isDigit(name[i]))
        ++i;
      result += '*';
    } else {
      result += name[i++];
    }
  }
  return result;
}

llvm::StringRef tpc::plan::parentModule(llvm::StringRef paramName) {
  size_t dot = paramName.rfind('.');
  return dot == llvm::StringRef::npos ? llvm::StringRef() : paramName.take_front(dot);
}

unsigned tpc::plan::wildcardCount(llvm::StringRef pattern) { return pattern.count('*'); }
