// The emitted binary's flags (tpcrt/flags.def) as a table the binary's parser and tpc's
// run and serve commands both read. Plain C++17, header only: tpc includes it without
// linking the runtime.
#ifndef TPCRT_FLAGS_H
#define TPCRT_FLAGS_H

#include <cstddef>
#include <string>

namespace tpcrt {

/// One flag of the binary, named by its row in flags.def.
enum class FlagId {
#define TPC_FLAG(id, name, value, fallback, uses, help) id,
#include "tpcrt/flags.def"
#undef TPC_FLAG
};

/// Who besides the binary takes a flag (flags.def's `uses`), and whether it repeats.
namespace flag_use {
enum : unsigned { None = 0, Run = 1, Serve = 2, Many = 4 };
} // namespace flag_use

struct FlagInfo {
  FlagId id;
  const char *name;
  const char *value;    // the placeholder; null for a switch
  const char *fallback; // the default, as --help says it; "" for none
  unsigned uses;        // flag_use bits
  const char *help;

  bool takesValue() const { return value != nullptr; }
  /// The help with its default (`other`'s, where a command passes another): what every
  /// --help prints.
  std::string described(const char *other = nullptr) const {
    const char *shown = other ? other : fallback;
    return *shown ? std::string(help) + " (default " + shown + ")" : std::string(help);
  }
};

inline constexpr FlagInfo kFlagTable[] = {
#define TPC_FLAG(id, name, value, fallback, uses, help)                                       \
  {FlagId::id, name, value, fallback, [] {                                                     \
     using namespace flag_use;                                                                 \
     return unsigned(uses);                                                                    \
   }(),                                                                                        \
   help},
#include "tpcrt/flags.def"
#undef TPC_FLAG
};

inline const FlagInfo &flagInfo(FlagId id) { return kFlagTable[size_t(id)]; }

} // namespace tpcrt

#endif // TPCRT_FLAGS_H
