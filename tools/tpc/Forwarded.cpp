// tpc run's and tpc serve's options that are the binary's flags, read from
// tpcrt/flags.def.
#include "Forwarded.h"

namespace tpc {

using tpcrt::FlagId;
using tpcrt::FlagInfo;

void ForwardedFlags::addTo(CLI::App *cmd, unsigned use,
                           std::map<FlagId, std::string> fallbacks) {
  fallbacks_ = std::move(fallbacks);
  for (const FlagInfo &flag : tpcrt::kFlagTable) {
    if (!(flag.uses & use))
      continue;
    auto own = fallbacks_.find(flag.id);
    std::string help = flag.described(own != fallbacks_.end() ? own->second.c_str() : nullptr);
    if (!flag.takesValue()) {
      cmd->add_flag(flag.name, switches_[flag.id], help);
      continue;
    }
    // Only --stop collects; of another flag given twice the last counts, as in
    // the binary.
    if (flag.uses & tpcrt::flag_use::Many)
      cmd->add_option(flag.name, many_[flag.id], help)
          ->type_name(flag.value)
          ->allow_extra_args(false);
    else
      cmd->add_option(flag.name, values_[flag.id], help)
          ->type_name(flag.value)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

bool ForwardedFlags::given(FlagId id) const {
  auto value = values_.find(id);
  auto values = many_.find(id);
  auto on = switches_.find(id);
  return (value != values_.end() && !value->second.empty()) ||
         (values != many_.end() && !values->second.empty()) ||
         (on != switches_.end() && on->second);
}

const std::string *ForwardedFlags::value(FlagId id) const {
  auto value = values_.find(id);
  return value != values_.end() && !value->second.empty() ? &value->second : nullptr;
}

std::vector<std::string> ForwardedFlags::arguments() const {
  std::vector<std::string> arguments;
  for (const FlagInfo &flag : tpcrt::kFlagTable) {
    if (!given(flag.id)) {
      if (auto own = fallbacks_.find(flag.id); own != fallbacks_.end())
        arguments.insert(arguments.end(), {flag.name, own->second});
    } else if (!flag.takesValue()) {
      arguments.push_back(flag.name);
    } else if (flag.uses & tpcrt::flag_use::Many) {
      for (const std::string &value : many_.at(flag.id))
        arguments.insert(arguments.end(), {flag.name, value});
    } else {
      arguments.insert(arguments.end(), {flag.name, values_.at(flag.id)});
    }
  }
  return arguments;
}

} // namespace tpc
