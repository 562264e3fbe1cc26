// The binary's flags that tpc run and tpc serve take and pass on as given, from the one
// table of them (tpcrt/flags.def): their options, their --help and the command line they
// make cannot disagree with the binary's.
#ifndef TPC_TOOLS_TPC_FORWARDED_H
#define TPC_TOOLS_TPC_FORWARDED_H

#include "tpcrt/flags.h"

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

namespace tpc {

class ForwardedFlags {
public:
  /// Adds to `cmd` an option for each flag of the table that `use` (flag_use::Run or
  /// flag_use::Serve) passes on. `fallbacks` replaces the table's default where this command
  /// passes another when the flag is not given (tpc run's --max-new-tokens).
  void addTo(CLI::App *cmd, unsigned use, std::map<tpcrt::FlagId, std::string> fallbacks = {});

  /// Whether the flag was given (a switch set, a value given at least once).
  bool given(tpcrt::FlagId id) const;
  /// The value given for a flag that takes one, else null.
  const std::string *value(tpcrt::FlagId id) const;
  /// The binary's arguments for the flags given, in the table's order, and for the others
  /// the fallbacks this command passes.
  std::vector<std::string> arguments() const;

private:
  // std::map: CLI11 keeps pointers to the values, which a map's nodes keep still.
  std::map<tpcrt::FlagId, std::string> values_;
  std::map<tpcrt::FlagId, std::vector<std::string>> many_; // the repeatable ones
  std::map<tpcrt::FlagId, bool> switches_;
  std::map<tpcrt::FlagId, std::string> fallbacks_;
};

} // namespace tpc

#endif // TPC_TOOLS_TPC_FORWARDED_H
