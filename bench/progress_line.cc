#include "progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace dedup::bench {

ProgressLine::ProgressLine(bool enabled)
    : enabled_(enabled), terminal_(isatty(STDERR_FILENO) == 1) {}

void ProgressLine::Show(const std::string& text) {
  if (!enabled_) return;
  if (!terminal_) {
    std::fprintf(stderr, "%s\n", text.c_str());
    return;
  }
  // Pad over the rest of a longer previous line.
  const size_t pad = width_ > text.size() ? width_ - text.size() : 0;
  std::fprintf(stderr, "\r%s%*s", text.c_str(), static_cast<int>(pad), "");
  std::fflush(stderr);
  width_ = std::max(width_, text.size());
}

void ProgressLine::Done() {
  if (enabled_ && terminal_ && width_ > 0) std::fprintf(stderr, "\n");
  width_ = 0;
}

}  // namespace dedup::bench
