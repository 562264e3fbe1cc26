// The whole-file read of tpcrt/file.h.
#include "tpcrt/file.h"

#include <fstream>
#include <iterator>
#include <sys/stat.h>

namespace tpcrt {

bool readFile(const std::string &path, std::string &out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return false;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  // The size stat gives is a hint only (a file still being written, or one of /proc).
  std::string text;
  text.reserve(size_t(st.st_size));
  text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad())
    return false;
  out = std::move(text);
  return true;
}

} // namespace tpcrt
