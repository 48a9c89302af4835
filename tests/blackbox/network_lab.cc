#include "tests/blackbox/network_lab.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/blackbox/dedupd_process.h"

extern char** environ;

namespace dedup::blackbox {
namespace {

constexpr char kNamespacePrefix[] = "dedup-lab-";
constexpr char kNetnsDir[] = "/run/netns";
// Created, and recreated, by every fault; nothing else in a node's
// namespace has rules.
constexpr char kFaultTable[] = "inet dedup_fault";
// Where Delay's proxy listens in a node's namespace, and the firewall mark
// of its own connections.
constexpr int kProxyPort = 7300;
constexpr int kProxyMark = 0x64;

std::string FirstExisting(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

std::string NftCommand() { return FirstExisting({"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"}); }

// Runs `args` with `input` on its standard input and returns what it
// wrote; an error, with that output, when it does not exit 0.
absl::StatusOr<std::string> Run(const std::vector<std::string>& args,
                                const std::string& input = "") {
  int in[2];
  int out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return absl::InternalError("pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& arg : copy) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (error != 0) {
    close(in[1]);
    close(out[0]);
    return absl::InternalError(absl::StrCat("cannot run ", args[0], ": ", strerror(error)));
  }
  // Inputs are a few hundred bytes, well inside a pipe's buffer.
  // A failed write shows as the command's failure, below.
  if (!input.empty()) (void)!write(in[1], input.data(), input.size());
  close(in[1]);
  std::string output;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = read(out[0], buffer, sizeof(buffer))) > 0) output.append(buffer, n);
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        "`", absl::StrJoin(args, " "), "` failed: ", absl::StripTrailingAsciiWhitespace(output)));
  }
  return output;
}

// Deletes the namespaces of labs whose test process is gone (a test that
// crashed never ran its destructor).
void RemoveAbandonedLabs(const std::string& ip) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsDir, error)) {
    const std::string name = entry.path().filename().string();
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, kNamespacePrefix)) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    (void)Run({ip, "netns", "del", name});
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetworkLab>> NetworkLab::Create(int nodes) {
  const std::string ip = IpCommand();
  if (ip.empty()) return absl::UnavailableError("no `ip` command (install iproute2)");
  if (NftCommand().empty()) return absl::UnavailableError("no `nft` command (install nftables)");
  if (geteuid() != 0) return absl::UnavailableError("network namespaces need root");
  RemoveAbandonedLabs(ip);

  const std::string prefix = absl::StrCat(kNamespacePrefix, getpid(), "-");
  std::vector<std::string> names;
  for (int node = 0; node < nodes; ++node) names.push_back(absl::StrCat(prefix, "n", node));
  // From here the destructor removes whatever was made, on any error.
  std::unique_ptr<NetworkLab> lab(new NetworkLab(prefix, names));
  const std::string hub = prefix + "hub";
  if (absl::StatusOr<std::string> made = Run({ip, "netns", "add", hub}); !made.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot make a network namespace: ", made.status().message()));
  }
  std::vector<std::vector<std::string>> steps = {
      {ip, "-n", hub, "link", "set", "lo", "up"},
      {ip, "-n", hub, "link", "add", "br0", "type", "bridge"},
      {ip, "-n", hub, "addr", "add", "10.77.0.1/24", "dev", "br0"},
      {ip, "-n", hub, "addr", "add", EtcdHost() + "/24", "dev", "br0"},
      {ip, "-n", hub, "link", "set", "br0", "up"}};
  for (int node = 0; node < nodes; ++node) {
    const std::string& ns = names[node];
    const std::string veth = absl::StrCat("v", node);
    steps.push_back({ip, "netns", "add", ns});
    steps.push_back({ip, "-n", ns, "link", "set", "lo", "up"});
    steps.push_back(
        {ip, "-n", hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns});
    steps.push_back({ip, "-n", hub, "link", "set", veth, "master", "br0"});
    steps.push_back({ip, "-n", hub, "link", "set", veth, "up"});
    steps.push_back({ip, "-n", ns, "addr", "add", lab->NodeHost(node) + "/24", "dev", "eth0"});
    steps.push_back({ip, "-n", ns, "link", "set", "eth0", "up"});
  }
  for (const std::vector<std::string>& step : steps) {
    if (absl::StatusOr<std::string> done = Run(step); !done.ok()) return done.status();
  }
  return lab;
}

NetworkLab::~NetworkLab() {
  for (pid_t proxy : proxies_) {
    kill(proxy, SIGKILL);
    while (waitpid(proxy, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  const std::string ip = IpCommand();
  for (const std::string& ns : node_namespaces_) (void)Run({ip, "netns", "del", ns});
  (void)Run({ip, "netns", "del", prefix_ + "hub"});
}

absl::Status NetworkLab::EnterHub() {
  const std::string path = absl::StrCat(kNetnsDir, "/", prefix_, "hub");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  const int entered = setns(fd, CLONE_NEWNET);
  const int error = errno;
  close(fd);
  if (entered != 0) {
    return absl::InternalError(absl::StrCat("cannot enter ", path, ": ", strerror(error)));
  }
  return absl::OkStatus();
}

std::string NetworkLab::NodeHost(int node) const { return absl::StrCat("10.77.0.", 10 + node); }

absl::Status NetworkLab::SetFault(int node, const std::string& rules) {
  // Declaring the table first makes the delete succeed when there is none.
  const std::string script =
      absl::StrCat("table ", kFaultTable, "\ndelete table ", kFaultTable, "\n", rules);
  absl::StatusOr<std::string> loaded =
      Run({IpCommand(), "netns", "exec", node_namespaces_[node], NftCommand(), "-f", "-"}, script);
  return loaded.status();
}

namespace {

std::string AddressSet(const NetworkLab& lab, const std::vector<int>& peers) {
  std::vector<std::string> hosts;
  for (int peer : peers) hosts.push_back(lab.NodeHost(peer));
  return absl::StrCat("{ ", absl::StrJoin(hosts, ", "), " }");
}

std::string Chain(const std::string& name, const std::string& hook, const std::string& rule) {
  return absl::StrCat("  chain ", name, " { type filter hook ", hook,
                      " priority 0; policy accept; ", rule, "; }\n");
}

std::string Table(const std::string& chains) {
  return absl::StrCat("table ", kFaultTable, " {\n", chains, "}\n");
}

}  // namespace

absl::Status NetworkLab::CutOff(int node, const std::vector<int>& peers) {
  const std::string set = AddressSet(*this, peers);
  return SetFault(node, Table(Chain("in", "input", "ip saddr " + set + " drop") +
                              Chain("out", "output", "ip daddr " + set + " drop")));
}

absl::Status NetworkLab::CutOffWithEtcd(int node, const std::vector<int>& peers) {
  std::vector<std::string> hosts = {EtcdHost()};
  for (int peer : peers) hosts.push_back(NodeHost(peer));
  const std::string set = absl::StrCat("{ ", absl::StrJoin(hosts, ", "), " }");
  return SetFault(node, Table(Chain("in", "input", "ip saddr " + set + " drop") +
                              Chain("out", "output", "ip daddr " + set + " drop")));
}

absl::Status NetworkLab::CutOffOutgoing(int node, const std::vector<int>& peers) {
  return SetFault(node,
                  Table(Chain("out", "output", "ip daddr " + AddressSet(*this, peers) + " drop")));
}

absl::Status NetworkLab::CutOffFromEtcd(int node) {
  return SetFault(node, Table(Chain("in", "input", "ip saddr " + EtcdHost() + " drop") +
                              Chain("out", "output", "ip daddr " + EtcdHost() + " drop")));
}

absl::Status NetworkLab::Lose(int node, int percent) {
  return SetFault(node, Table(Chain("out", "output",
                                    absl::StrCat("numgen random mod 100 < ", percent, " drop"))));
}

absl::Status NetworkLab::Heal(int node) { return SetFault(node, ""); }

absl::Status NetworkLab::Delay(int node, absl::Duration delay) { return DelayTo(node, {}, delay); }

absl::Status NetworkLab::DelayTo(int node, const std::map<std::string, absl::Duration>& by_host,
                                 absl::Duration otherwise) {
  const std::string host = NodeHost(node);
  std::vector<std::string> delays;
  for (const auto& [to, delay] : by_host) {
    delays.push_back(absl::StrCat(to, "=", absl::ToInt64Milliseconds(delay)));
  }
  std::vector<std::string> args = {
      IpCommand(),
      "netns",
      "exec",
      node_namespaces_[node],
      "python3",
      DELAY_PROXY_PATH,
      absl::StrCat("--listen_port=", kProxyPort),
      "--node_host=" + host,
      absl::StrCat("--delay_ms=", absl::ToInt64Milliseconds(otherwise)),
      "--delay_ms_to=" + absl::StrJoin(delays, ","),
      absl::StrCat("--mark=", kProxyMark)};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0)
    return absl::InternalError(absl::StrCat("cannot run ", args[0], ": ", strerror(error)));
  proxies_.push_back(pid);

  // The proxy listens on every address of the node's namespace; this
  // process reaches it over the bridge once it does.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(kProxyPort);
    inet_pton(AF_INET, host.c_str(), &address.sin_addr);
    const bool up = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (up) break;
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      proxies_.pop_back();
      return absl::InternalError("the delay proxy exited before it listened");
    }
    if (absl::Now() > give_up) return absl::DeadlineExceededError("the delay proxy did not listen");
    absl::SleepFor(absl::Milliseconds(50));
  }
  // Every TCP connection the node opens to the lab, and every one opened
  // to its port, goes through the proxy, but not the proxy's own.
  const std::string rules = absl::StrFormat(
      "table ip dedup_delay {\n"
      "  chain out { type nat hook output priority -100; policy accept; "
      "meta mark != %d ip daddr 10.77.0.0/24 ip daddr != %s tcp dport != %d redirect to :%d; }\n"
      "  chain in { type nat hook prerouting priority -100; policy accept; "
      "ip daddr %s tcp dport %d redirect to :%d; }\n"
      "}\n",
      kProxyMark, host, kProxyPort, kProxyPort, host, kNodePort, kProxyPort);
  return Run({IpCommand(), "netns", "exec", node_namespaces_[node], NftCommand(), "-f", "-"}, rules)
      .status();
}

}  // namespace dedup::blackbox
