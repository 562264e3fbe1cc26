// transformers' plan-key matching: `*` stands for one numeric layer index.
#ifndef TPC_PLAN_MATCHER_H
#define TPC_PLAN_MATCHER_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace tpc::plan {

/// True when `pattern` matches `name`: each `*` stands for one run of digits (a layer or
/// expert index) and every other character matches itself. transformers rewrites each digit
/// run of a name to `*` and looks the result up, so it never matches a key that spells an
/// index; tpc also accepts such a key, as an exact match.
bool matchesPattern(llvm::StringRef pattern, llvm::StringRef name);

/// The name with each run of digits replaced by `*` (transformers' `re.sub(r"\d+", "*", ...)`).
std::string genericName(llvm::StringRef name);

/// The module that owns a parameter: the name up to its last dot ("" for a top-level one).
llvm::StringRef parentModule(llvm::StringRef paramName);

/// How many `*` a pattern has; fewer means more specific.
unsigned wildcardCount(llvm::StringRef pattern);

} // namespace tpc::plan

#endif // TPC_PLAN_MATCHER_H
