// What a person sees of the weights' load (runtime/driver/progress.h), written into memory:
// the mode TPC_PROGRESS and the terminal give, no bar for a load within a second, a bar that
// fills after one, and the "ready" line covering the bar it replaces.
#include "../../runtime/driver/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace tpcrt;

namespace {

/// Output written to a FILE, as a string once closed.
class Captured {
public:
  Captured() : file_(open_memstream(&data_, &size_)) {}
  ~Captured() {
    if (file_)
      std::fclose(file_);
    std::free(data_);
  }
  std::FILE *file() { return file_; }
  std::string text() {
    std::fclose(file_);
    file_ = nullptr;
    return std::string(data_, size_);
  }

private:
  char *data_ = nullptr;
  size_t size_ = 0;
  std::FILE *file_;
};

int count(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

} // namespace

TEST(Progress, TheModeComesFromTheSettingAndTheTerminal) {
  const char *error = nullptr;
  EXPECT_EQ(progressMode(nullptr, true, error), ProgressMode::Terminal);
  EXPECT_EQ(progressMode(nullptr, false, error), ProgressMode::Never);
  EXPECT_EQ(progressMode("auto", false, error), ProgressMode::Never);
  EXPECT_EQ(progressMode("terminal", false, error), ProgressMode::Terminal);
  EXPECT_EQ(progressMode("always", false, error), ProgressMode::Always);
  EXPECT_EQ(progressMode("never", true, error), ProgressMode::Never);
  EXPECT_EQ(error, nullptr);
  EXPECT_EQ(progressMode("yes", true, error), ProgressMode::Never);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("TPC_PROGRESS"), std::string::npos);
}

TEST(Progress, NeverWritesNothing) {
  Captured out;
  {
    LoadProgress progress(ProgressMode::Never, 100, out.file());
    progress.advance(100);
    progress.finish();
  }
  EXPECT_EQ(out.text(), "");
}

TEST(Progress, ALoadWithinASecondShowsOnlyTheReadyLine) {
  Captured out;
  LoadProgress progress(ProgressMode::Terminal, 3000000, out.file());
  for (int i = 0; i < 3; ++i)
    progress.advance(1000000);
  progress.finish();
  std::string text = out.text();
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(text.rfind("tpc: weights loaded, 3.0 MB in 0.", 0), 0u) << text;
  EXPECT_EQ(text.substr(text.size() - 8), "; ready\n") << text;
}

TEST(Progress, ALoadPastASecondDrawsABarThatFills) {
  Captured out;
  LoadProgress progress(ProgressMode::Terminal, 4000000, out.file());
  progress.advance(1000000); // within the first second: nothing yet
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  progress.advance(1000000); // half: drawn
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  progress.advance(2000000); // all: drawn again, a tenth of a second later
  progress.finish();
  std::string text = out.text();
  EXPECT_EQ(count(text, "\rtpc: loading weights ["), 2) << text;
  EXPECT_NE(text.find("[###############...............]  50% 2.0/4.0 MB"), std::string::npos)
      << text;
  EXPECT_NE(text.find("[##############################] 100% 4.0/4.0 MB"), std::string::npos)
      << text;
  // The last line starts where the bar did and is padded to its width: nothing of the bar
  // shows after it.
  size_t last = text.rfind('\r');
  std::string line = text.substr(last + 1);
  EXPECT_EQ(line.rfind("tpc: weights loaded, 4.0 MB in 1.", 0), 0u) << line;
  size_t barWidth = text.find('\r', 1) - 1; // the first bar, from its \r to the next
  EXPECT_EQ(line.size(), barWidth + 1) << text; // and the newline
}

TEST(Progress, AnAbandonedLoadEndsTheBarsLine) {
  Captured out;
  {
    LoadProgress progress(ProgressMode::Always, 10, out.file());
    progress.advance(5);
  } // an error: no finish
  std::string text = out.text();
  EXPECT_NE(text.find("[###############...............]  50%"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find("ready"), std::string::npos);
}
