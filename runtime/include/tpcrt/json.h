// JSON that tpc did not write (a safetensors header, a requests file), parsed one way: bounded
// nesting, and no key given twice in one object (which entry would count?). Plain C++17 with
// nlohmann-json.
#ifndef TPCRT_JSON_H
#define TPCRT_JSON_H

#include <nlohmann/json.hpp>

#include <string>

namespace tpcrt {

/// Parses `text`; throws std::runtime_error naming the problem for nesting deeper than
/// `maxDepth` levels and for a repeated key, nlohmann::json::parse_error for malformed JSON.
nlohmann::json parseUntrustedJson(const std::string &text, int maxDepth);

} // namespace tpcrt

#endif // TPCRT_JSON_H
