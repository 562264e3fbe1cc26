// JSON that tpc did not write (a safetensors header, a requests file), parsed one way: bounded
// nesting, and no key given twice in one object (which entry would count?). Plain C++17 with
// nlohmann-json.
#ifndef TPCRT_JSON_H
#define TPCRT_JSON_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tpcrt {

/// Parses `text`; throws std::runtime_error naming the problem for nesting deeper than
/// `maxDepth` levels, for a repeated key, and for an object of more than `maxKeys` keys or more
/// than `maxTotalKeys` in all (what is read again in its order, as nlohmann::ordered_json,
/// costs the square of each object's keys), nlohmann::json::parse_error for malformed JSON.
nlohmann::json parseUntrustedJson(const std::string &text, int maxDepth,
                                  size_t maxKeys = SIZE_MAX, size_t maxTotalKeys = SIZE_MAX);

} // namespace tpcrt

#endif // TPCRT_JSON_H
