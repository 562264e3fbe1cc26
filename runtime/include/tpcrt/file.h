// Reading a whole file, the one way libtpcrt does it (checkpoint indexes, tokenizers, chat
// templates, prompt files). Plain C++17.
#ifndef TPCRT_FILE_H
#define TPCRT_FILE_H

#include <string>

namespace tpcrt {

/// The whole of the regular file at `path` into `out`. False when it is missing, not a
/// regular file (a directory opens, but reads nothing) or cannot be read; `out` is then left
/// as it was.
bool readFile(const std::string &path, std::string &out);

} // namespace tpcrt

#endif // TPCRT_FILE_H
