#include "dedupd_process.h"

#include <ftw.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace dedup::bench {
namespace {

int RemoveEntry(const char* path, const struct stat* /*st*/, int /*type*/, FTW* /*ftw*/) {
  return std::remove(path);
}

void RemoveTree(const std::string& path) {
  nftw(path.c_str(), RemoveEntry, 32, FTW_DEPTH | FTW_PHYS);
}

// Waits up to `timeout` for `pid` to exit; true if it did.
bool WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || done < 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

DedupdProcess::DedupdProcess(std::string temp_dir, pid_t pid)
    : temp_dir_(std::move(temp_dir)), data_dir_(temp_dir_ + "/data"), pid_(pid) {}

absl::StatusOr<std::unique_ptr<DedupdProcess>> DedupdProcess::Start(
    const std::string& binary, const std::vector<std::string>& extra_flags) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/dedup_bench.XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, " failed"));
  }
  const std::string port_file = pattern + "/port";
  std::vector<std::string> args = {binary,
                                   "--listen=127.0.0.1:0",
                                   "--metrics_listen=off",
                                   "--log_level=warn",
                                   "--data_dir=" + pattern + "/data",
                                   "--port_file=" + port_file};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // The server goes when the bench goes, however the bench ends.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    execv(argv[0], argv.data());
    std::perror(argv[0]);
    _exit(127);
  }
  auto process = std::unique_ptr<DedupdProcess>(new DedupdProcess(pattern, pid));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream file(port_file);
    int port = 0;
    if (file >> port && port > 0) {
      process->target_ = absl::StrCat("127.0.0.1:", port);
      return process;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->pid_ = 0;
      return absl::UnavailableError(
          absl::StrCat(binary, " exited before listening (status ", status, ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(binary, " wrote no port within 20 s"));
}

DedupdProcess::~DedupdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    if (!WaitExit(pid_, std::chrono::seconds(15))) {
      kill(pid_, SIGKILL);
      WaitExit(pid_, std::chrono::seconds(5));
    }
  }
  RemoveTree(temp_dir_);
}

}  // namespace dedup::bench
