// The weights' load as a person sees it (progress.h).
#include "progress.h"

#include <cstring>
#include <string>

namespace tpcrt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

} // namespace

ProgressMode progressMode(const char *setting, bool stderrIsTerminal, const char *&error) {
  error = nullptr;
  if (!setting || !*setting || !std::strcmp(setting, "auto"))
    return stderrIsTerminal ? ProgressMode::Terminal : ProgressMode::Never;
  if (!std::strcmp(setting, "terminal"))
    return ProgressMode::Terminal;
  if (!std::strcmp(setting, "always"))
    return ProgressMode::Always;
  if (!std::strcmp(setting, "never"))
    return ProgressMode::Never;
  error = "TPC_PROGRESS must be auto, terminal, always or never";
  return ProgressMode::Never;
}

LoadProgress::LoadProgress(ProgressMode mode, uint64_t total, std::FILE *to)
    : mode_(mode), total_(total), to_(to), start_(Clock::now()), drawn_(start_) {}

LoadProgress::~LoadProgress() {
  if (drawing_)
    std::fputc('\n', to_);
}

void LoadProgress::advance(uint64_t bytes) {
  done_ += bytes;
  if (mode_ == ProgressMode::Never)
    return;
  Clock::time_point now = Clock::now();
  bool due = mode_ == ProgressMode::Always || now - start_ >= std::chrono::seconds(1);
  if (due && (!drawing_ || now - drawn_ >= std::chrono::milliseconds(100))) {
    drawn_ = now;
    draw();
  }
}

void LoadProgress::draw() {
  constexpr int kWidth = 30;
  double part = total_ ? double(done_ < total_ ? done_ : total_) / double(total_) : 1.0;
  int filled = int(part * kWidth);
  std::string bar = std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.');
  drawnWidth_ = std::fprintf(to_, "\rtpc: loading weights [%s] %3d%% %.1f/%.1f MB",
                             bar.c_str(), int(part * 100), double(done_) / 1e6,
                             double(total_) / 1e6);
  std::fflush(to_);
  drawing_ = true;
}

void LoadProgress::finish() {
  if (mode_ == ProgressMode::Never)
    return;
  // The line overwrites the bar where one was drawn, spaces covering the rest of it.
  int width = std::fprintf(to_, "%stpc: weights loaded, %.1f MB in %.1f s; ready",
                           drawing_ ? "\r" : "", double(done_) / 1e6,
                           seconds(Clock::now() - start_));
  std::fprintf(to_, "%*s\n", drawing_ && drawnWidth_ > width ? drawnWidth_ - width : 0, "");
  std::fflush(to_);
  drawing_ = false;
}

} // namespace tpcrt
