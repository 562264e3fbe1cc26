#include "tpcrt/json.h"

#include <set>
#include <stdexcept>
#include <vector>

namespace tpcrt {

nlohmann::json parseUntrustedJson(const std::string &text, int maxDepth, size_t maxKeys,
                                  size_t maxTotalKeys) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys; // of each object being parsed
  size_t total = 0;
  return nlohmann::json::parse(text, [&](int depth, Event event, nlohmann::json &parsed) {
    if ((event == Event::object_start || event == Event::array_start) && depth >= maxDepth)
      throw std::runtime_error("nested deeper than " + std::to_string(maxDepth) + " levels");
    if (event == Event::object_start)
      keys.emplace_back();
    else if (event == Event::object_end)
      keys.pop_back();
    else if (event == Event::key && !keys.back().insert(parsed.get<std::string>()).second)
      throw std::runtime_error("key '" + parsed.get<std::string>() + "' is given twice");
    else if (event == Event::key && keys.back().size() > maxKeys)
      throw std::runtime_error("an object has more than " + std::to_string(maxKeys) + " keys");
    else if (event == Event::key && ++total > maxTotalKeys)
      throw std::runtime_error("it has more than " + std::to_string(maxTotalKeys) +
                               " keys in all");
    return true;
  });
}

} // namespace tpcrt
