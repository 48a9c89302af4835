#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dedup::server {
namespace {

// The fields of /proc/self/stat this collector reads, numbered as in
// proc(5) (1-based; the first after the parenthesized command is 3).
constexpr size_t kUtime = 14;
constexpr size_t kStime = 15;
constexpr size_t kStartTime = 22;
constexpr size_t kVsize = 23;
constexpr size_t kRss = 24;

struct ProcStat {
  double cpu_seconds = 0;
  double start_ticks = 0;
  double virtual_bytes = 0;
  double resident_bytes = 0;
};

std::optional<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<ProcStat> ReadProcStat() {
  const std::optional<std::string> text = ReadFile("/proc/self/stat");
  if (!text.has_value()) return std::nullopt;
  // The command may hold spaces and parentheses: fields start after the
  // last ')'.
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  const std::vector<std::string> fields =
      absl::StrSplit(text->substr(close + 1), ' ', absl::SkipEmpty());
  auto field = [&fields](size_t number, double* out) {
    const size_t index = number - 3;
    uint64_t value = 0;
    if (index >= fields.size() || !absl::SimpleAtoi(fields[index], &value)) return false;
    *out = static_cast<double>(value);
    return true;
  };
  ProcStat stat;
  double utime = 0;
  double stime = 0;
  double rss_pages = 0;
  if (!field(kUtime, &utime) || !field(kStime, &stime) || !field(kStartTime, &stat.start_ticks) ||
      !field(kVsize, &stat.virtual_bytes) || !field(kRss, &rss_pages)) {
    return std::nullopt;
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  stat.cpu_seconds = (utime + stime) / ticks;
  stat.start_ticks /= ticks;  // Now seconds since boot.
  stat.resident_bytes = rss_pages * static_cast<double>(sysconf(_SC_PAGESIZE));
  return stat;
}

std::optional<double> BootTimeSeconds() {
  const std::optional<std::string> text = ReadFile("/proc/stat");
  if (!text.has_value()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    uint64_t btime = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtoi(line, &btime)) {
      return static_cast<double>(btime);
    }
  }
  return std::nullopt;
}

std::optional<double> OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // Not the descriptor of the listing itself.
}

std::optional<double> MaxFds() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return static_cast<double>(limit.rlim_cur);
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return prometheus::MetricFamily{name, help, type, {metric}};
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  if (const std::optional<ProcStat> stat = ReadProcStat()) {
    families.push_back(Family("process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.",
                              MetricType::Counter, stat->cpu_seconds));
    families.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                              MetricType::Gauge, stat->resident_bytes));
    families.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                              MetricType::Gauge, stat->virtual_bytes));
    if (const std::optional<double> boot = BootTimeSeconds()) {
      families.push_back(Family("process_start_time_seconds",
                                "Start time of the process since unix epoch in seconds.",
                                MetricType::Gauge, *boot + stat->start_ticks));
    }
  }
  if (const std::optional<double> open = OpenFds()) {
    families.push_back(
        Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, *open));
  }
  if (const std::optional<double> max = MaxFds()) {
    families.push_back(Family("process_max_fds", "Maximum number of open file descriptors.",
                              MetricType::Gauge, *max));
  }
  return families;
}

}  // namespace dedup::server
