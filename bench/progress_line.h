#ifndef DEDUP_BENCH_PROGRESS_LINE_H_
#define DEDUP_BENCH_PROGRESS_LINE_H_

#include <string>

namespace dedup::bench {

// A status line on stderr: redrawn in place on a terminal, one line per
// update otherwise (so a log written by nohup stays readable). Not
// thread-safe: one thread updates it.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled);
  void Show(const std::string& text);
  // Ends the line on a terminal.
  void Done();

 private:
  const bool enabled_;
  const bool terminal_;
  size_t width_ = 0;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_PROGRESS_LINE_H_
