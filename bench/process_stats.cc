#include "process_stats.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace dedup::bench {
namespace {

struct ProcStat {
  pid_t ppid = 0;
  uint64_t ticks = 0;  // utime + stime
  uint64_t start = 0;  // starttime
};

// Fields of /proc/<pid>/stat after the command name, which may hold spaces
// and parentheses, so parsing starts after the last ')'.
bool ReadStat(pid_t pid, ProcStat* out) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> fields;  // fields[0] is field 3 (state)
  std::string field;
  while (rest >> field) fields.push_back(field);
  if (fields.size() < 20) return false;
  out->ppid = static_cast<pid_t>(std::atol(fields[1].c_str()));
  out->ticks = std::strtoull(fields[11].c_str(), nullptr, 10) +  // utime (field 14)
               std::strtoull(fields[12].c_str(), nullptr, 10);   // stime (field 15)
  out->start = std::strtoull(fields[19].c_str(), nullptr, 10);   // starttime (field 22)
  return true;
}

std::map<pid_t, ProcStat> AllProcesses() {
  std::map<pid_t, ProcStat> all;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return all;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atol(entry->d_name));
    ProcStat stat;
    if (pid > 0 && ReadStat(pid, &stat)) all[pid] = stat;
  }
  closedir(proc);
  return all;
}

uint64_t g_disk_bytes = 0;
std::set<std::pair<dev_t, ino_t>>* g_seen = nullptr;

int AddFile(const char* /*path*/, const struct stat* st, int type, FTW* /*ftw*/) {
  if (type == FTW_F || type == FTW_D) {
    if (g_seen->insert({st->st_dev, st->st_ino}).second) {
      g_disk_bytes += static_cast<uint64_t>(st->st_blocks) * 512;
    }
  }
  return 0;
}

}  // namespace

// `root` and, when `with_descendants`, every process below it in `all`.
template <typename Map>
std::set<pid_t> TreeOf(const Map& all, pid_t root, bool with_descendants) {
  std::set<pid_t> tree = {root};
  // Parents have lower pids except after wrap-around; iterate to a fixed point.
  for (bool grew = with_descendants; grew;) {
    grew = false;
    for (const auto& [p, stat] : all) {
      if (tree.count(p) == 0 && tree.count(stat.ppid) > 0) {
        tree.insert(p);
        grew = true;
      }
    }
  }
  return tree;
}

double CpuSeconds(pid_t pid, bool with_descendants) {
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (!with_descendants) {
    ProcStat stat;
    return ReadStat(pid, &stat) ? stat.ticks / tick : -1.0;
  }
  const std::map<pid_t, ProcStat> all = AllProcesses();
  if (all.count(pid) == 0) return -1.0;
  uint64_t ticks = 0;
  for (pid_t p : TreeOf(all, pid, true)) ticks += all.at(p).ticks;
  return ticks / tick;
}

uint64_t ResidentBytes(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;  // "VmRSS:  123 kB"
    }
  }
  return 0;
}

uint64_t DiskBytes(const std::string& path) {
  std::set<std::pair<dev_t, ino_t>> seen;
  g_seen = &seen;
  g_disk_bytes = 0;
  nftw(path.c_str(), AddFile, 32, FTW_PHYS);
  g_seen = nullptr;
  return g_disk_bytes;
}

double OwnCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

CpuCensus CpuCensus::Take() {
  CpuCensus census;
  for (const auto& [pid, stat] : AllProcesses()) {
    census.processes_[pid] = Entry{stat.ppid, stat.start, stat.ticks};
  }
  return census;
}

double CpuCensus::OthersSince(const CpuCensus& before, pid_t server, bool with_descendants) const {
  std::set<pid_t> excluded = {getpid()};
  if (server > 0) {
    for (pid_t p : TreeOf(processes_, server, with_descendants)) excluded.insert(p);
  }
  uint64_t ticks = 0;
  for (const auto& [pid, now] : processes_) {
    if (excluded.count(pid) > 0) continue;
    const auto then = before.processes_.find(pid);
    const bool same = then != before.processes_.end() && then->second.start == now.start;
    const uint64_t earlier = same ? then->second.ticks : 0;
    if (now.ticks > earlier) ticks += now.ticks - earlier;
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace dedup::bench
