#include "tests/blackbox/dedupctl_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

extern char** environ;

namespace dedup::blackbox {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);

}  // namespace

std::string Describe(const DedupctlRun& run) {
  return absl::StrCat(run.command, " ", Describe(run.status), " after ",
                      absl::FormatDuration(run.took), "\n--- stdout:\n", run.out, "--- stderr:\n",
                      run.err);
}

absl::StatusOr<std::unique_ptr<DedupctlProcess>> DedupctlProcess::Spawn(
    const std::vector<std::string>& args, const std::string& log_prefix) {
  const char* binary = getenv("DEDUPCTL_BINARY");
  std::vector<std::string> argv_strings = {binary != nullptr && *binary != '\0' ? binary
                                                                                : DEDUPCTL_PATH};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string out_path = log_prefix + ".out";
  const std::string err_path = log_prefix + ".err";

  // posix_spawn rather than fork: the test process runs gRPC threads.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int error =
      posix_spawn(&pid, argv_strings[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  const std::string command = absl::StrCat("dedupctl ", absl::StrJoin(args, " "));
  if (error != 0) {
    return absl::InternalError(
        absl::StrCat("cannot run ", argv_strings[0], " (", command, "): ", strerror(error)));
  }
  return std::unique_ptr<DedupctlProcess>(
      new DedupctlProcess(pid, command, log_prefix, absl::Now()));
}

DedupctlProcess::~DedupctlProcess() {
  if (run_.has_value()) return;
  kill(pid_, SIGKILL);
  int wait_status = 0;
  while (waitpid(pid_, &wait_status, 0) < 0 && errno == EINTR) {
  }
}

std::optional<ExitStatus> DedupctlProcess::Reap() {
  int wait_status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid_, &wait_status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped != pid_) return std::nullopt;
  return ExitStatus::FromWaitStatus(wait_status);
}

std::optional<DedupctlRun> DedupctlProcess::Wait(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!run_.has_value()) {
    if (std::optional<ExitStatus> status = Reap()) {
      run_ = DedupctlRun{command_, *status, ReadFile(log_prefix_ + ".out"),
                         ReadFile(log_prefix_ + ".err"), absl::Now() - started_};
      break;
    }
    if (absl::Now() >= give_up) break;
    absl::SleepFor(kPollInterval);
  }
  return run_;
}

std::string DedupctlProcess::Out() const { return ReadFile(log_prefix_ + ".out"); }

absl::StatusOr<DedupctlRun> RunDedupctl(const std::vector<std::string>& args,
                                        const std::string& log_prefix, absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<DedupctlProcess>> process =
      DedupctlProcess::Spawn(args, log_prefix);
  if (!process.ok()) return process.status();
  if (std::optional<DedupctlRun> run = (*process)->Wait(timeout)) return *run;
  const std::string out = (*process)->Out();
  const std::string err = ReadFile(log_prefix + ".err");
  return absl::DeadlineExceededError(
      absl::StrCat((*process)->command(), " still ran after ", absl::FormatDuration(timeout),
                   "; killed.\n--- stdout:\n", out, "--- stderr:\n", err));
}

}  // namespace dedup::blackbox
