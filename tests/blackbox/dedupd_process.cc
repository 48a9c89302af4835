#include "tests/blackbox/dedupd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

extern char** environ;

namespace dedup::blackbox {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kPollInterval{5};
// How long a dedupd may take to open its data directory and bind.
constexpr milliseconds kStartTimeout{10'000};
constexpr milliseconds kConnectTimeout{5'000};

// Distinguishes the runs of one test, whose files share a work directory.
std::atomic<int> run_counter{0};

// The port in a complete port file ("7400\n"), or nullopt while dedupd has
// not finished writing it.
std::optional<int> ParsePortFile(const std::string& text) {
  if (!absl::EndsWith(text, "\n")) return std::nullopt;
  int port = 0;
  if (!absl::SimpleAtoi(absl::StripSuffix(text, "\n"), &port) || port <= 0) {
    return std::nullopt;
  }
  return port;
}

}  // namespace

ExitStatus ExitStatus::FromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return Exited(WEXITSTATUS(wait_status));
  return Signaled(WTERMSIG(wait_status));
}

std::string Describe(const ExitStatus& status) {
  if (status.exited) return absl::StrCat("exited with code ", status.code);
  return absl::StrCat("killed by signal ", status.signal, " (", strsignal(status.signal), ")");
}

void PrintTo(const ExitStatus& status, std::ostream* os) { *os << Describe(status); }

std::vector<int> FreePorts(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t length = sizeof(address);
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    ports.push_back(ntohs(address.sin_port));
    fds.push_back(fd);  // Held until all are chosen, so that they differ.
  }
  for (int fd : fds) close(fd);
  return ports;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string IpCommand() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<DedupdProcess>> DedupdProcess::Spawn(
    const std::vector<std::string>& flags, const std::string& log_path,
    const std::string& network_namespace) {
  const char* binary = getenv("DEDUPD_BINARY");
  std::vector<std::string> args;
  if (!network_namespace.empty()) args = {IpCommand(), "netns", "exec", network_namespace};
  args.push_back(binary != nullptr && *binary != '\0' ? binary : DEDUPD_PATH);
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // posix_spawn rather than fork: the test process runs gRPC threads, and
  // nothing may run in a forked copy of them before exec.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  // dedupd must see SIGTERM as an operator's shell would send it, whatever
  // the test runner blocks or ignores.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid = 0;
  const int error = posix_spawn(&pid, args[0].c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("cannot run ", args[0], ": ", strerror(error)));
  }
  return std::unique_ptr<DedupdProcess>(new DedupdProcess(pid, log_path));
}

DedupdProcess::~DedupdProcess() {
  if (!exit_.has_value()) Kill();
}

std::optional<ExitStatus> DedupdProcess::Reap() {
  if (exit_.has_value()) return exit_;
  int wait_status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid_, &wait_status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == pid_) exit_ = ExitStatus::FromWaitStatus(wait_status);
  return exit_;
}

std::optional<ExitStatus> DedupdProcess::WaitForExit(milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (!Reap().has_value() && Clock::now() < deadline) {
    std::this_thread::sleep_for(kPollInterval);
  }
  return Reap();
}

absl::StatusOr<ExitStatus> DedupdProcess::Terminate(milliseconds timeout) {
  if (!exit_.has_value()) kill(pid_, SIGTERM);
  std::optional<ExitStatus> status = WaitForExit(timeout);
  if (status.has_value()) return *status;
  Kill();
  return absl::DeadlineExceededError(
      absl::StrCat("dedupd (pid ", pid_, ") did not exit within ", timeout.count(),
                   " ms of SIGTERM and was killed. Its output:\n", Output()));
}

ExitStatus DedupdProcess::Kill() {
  if (exit_.has_value()) return *exit_;
  kill(pid_, SIGKILL);
  int wait_status = 0;
  while (waitpid(pid_, &wait_status, 0) < 0 && errno == EINTR) {
  }
  exit_ = ExitStatus::FromWaitStatus(wait_status);
  return *exit_;
}

std::string DedupdProcess::Output() const { return ReadFile(log_path_); }

absl::StatusOr<FinishedRun> RunToExit(const std::vector<std::string>& flags,
                                      const std::string& log_path, milliseconds timeout) {
  absl::StatusOr<std::unique_ptr<DedupdProcess>> process = DedupdProcess::Spawn(flags, log_path);
  if (!process.ok()) return process.status();
  std::optional<ExitStatus> status = (*process)->WaitForExit(timeout);
  if (!status.has_value()) {
    (*process)->Kill();
    return absl::DeadlineExceededError(
        absl::StrCat("dedupd was expected to exit but still ran after ", timeout.count(),
                     " ms; killed. Its output:\n", (*process)->Output()));
  }
  return FinishedRun{*status, (*process)->Output()};
}

absl::StatusOr<std::unique_ptr<ServingDedupd>> ServingDedupd::Start(
    const std::string& work_dir, const std::string& data_dir,
    const std::vector<std::string>& flags) {
  const int run = ++run_counter;
  const std::string port_file = absl::StrCat(work_dir, "/port-", run);
  const std::string log_file = absl::StrCat(work_dir, "/dedupd-", run, ".log");
  std::vector<std::string> all_flags = {"--listen=127.0.0.1:0", "--metrics_listen=off",
                                        "--port_file=" + port_file, "--data_dir=" + data_dir};
  all_flags.insert(all_flags.end(), flags.begin(), flags.end());

  std::unique_ptr<ServingDedupd> server(new ServingDedupd());
  absl::StatusOr<std::unique_ptr<DedupdProcess>> process =
      DedupdProcess::Spawn(all_flags, log_file);
  if (!process.ok()) return process.status();
  server->process_ = std::move(*process);

  const Clock::time_point deadline = Clock::now() + kStartTimeout;
  std::optional<int> port;
  while (!(port = ParsePortFile(ReadFile(port_file))).has_value()) {
    if (std::optional<ExitStatus> exited = server->process_->WaitForExit(kPollInterval)) {
      return absl::FailedPreconditionError(absl::StrCat("dedupd ", Describe(*exited),
                                                        " before serving. Its output:\n",
                                                        server->process_->Output()));
    }
    if (Clock::now() >= deadline) {
      server->process_->Kill();
      return absl::DeadlineExceededError(
          absl::StrCat("dedupd wrote no port file within ", kStartTimeout.count(),
                       " ms; killed. Its output:\n", server->process_->Output()));
    }
  }
  server->port_ = *port;
  server->channel_ =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", *port), grpc::InsecureChannelCredentials());
  if (!server->channel_->WaitForConnected(std::chrono::system_clock::now() + kConnectTimeout)) {
    return absl::UnavailableError(absl::StrCat("cannot connect to dedupd on 127.0.0.1:", *port,
                                               ". Its output:\n", server->process_->Output()));
  }
  server->client_ = std::make_unique<DedupClient>(server->channel_);
  return server;
}

}  // namespace dedup::blackbox
