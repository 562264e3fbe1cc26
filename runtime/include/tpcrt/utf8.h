// UTF-8 as the runtime's text engines (the tokenizer, the chat template) check and write it:
// every text that comes from outside is checked once, strictly, before anything reads it.
#ifndef TPCRT_UTF8_H
#define TPCRT_UTF8_H

#include <cstdint>
#include <string>

namespace tpcrt {

/// The offset of the first byte of `s` that begins no valid UTF-8 character, or npos when all
/// of `s` is valid. Strict, as Python's decoder and Rust's str are: no overlong forms, no
/// surrogates, nothing past U+10FFFF, no character cut short (its first byte is the one named).
size_t firstInvalidUtf8(const std::string &s);

/// Appends code point `cp` (at most U+10FFFF, no surrogate) as UTF-8.
void appendUtf8(std::string &out, uint32_t cp);

} // namespace tpcrt

#endif // TPCRT_UTF8_H
