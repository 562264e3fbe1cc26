// What a person watching rank 0 load its weights sees: nothing for a load that is done
// within a second, else a bar that fills as the tensors arrive; then one line, the bytes
// loaded and "ready". Only on a terminal: what scripts read (a pipe, a file) never holds
// any of it.
#ifndef TPCRT_DRIVER_PROGRESS_H
#define TPCRT_DRIVER_PROGRESS_H

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace tpcrt {

/// When to show the progress: TPC_PROGRESS=auto (the default: when stderr is a terminal),
/// terminal (tpc run and tpc launch say the rank's output reaches one, through their pipe),
/// always (from the start, wherever stderr goes: for logs and tests) or never.
enum class ProgressMode { Never, Terminal, Always };
/// The mode TPC_PROGRESS and stderr give; `error` set for a value it cannot read.
ProgressMode progressMode(const char *setting, bool stderrIsTerminal, const char *&error);

class LoadProgress {
public:
  /// `total`: the bytes to load; Never draws nothing.
  LoadProgress(ProgressMode mode, uint64_t total, std::FILE *to = stderr);
  /// A load abandoned (an error) ends the bar's line, so that the error has its own.
  ~LoadProgress();
  LoadProgress(const LoadProgress &) = delete;
  LoadProgress &operator=(const LoadProgress &) = delete;
  /// `bytes` more are loaded: redraws the bar, at most ten times a second, once a second
  /// has passed (at once under Always).
  void advance(uint64_t bytes);
  /// Loading is done: the bar gives way to one line, the bytes, the time and "ready".
  void finish();

private:
  void draw();

  ProgressMode mode_;
  uint64_t total_, done_ = 0;
  std::FILE *to_;
  std::chrono::steady_clock::time_point start_, drawn_;
  bool drawing_ = false;
  int drawnWidth_ = 0; // of the bar last drawn, to cover when the last line replaces it
};

} // namespace tpcrt

#endif // TPCRT_DRIVER_PROGRESS_H
