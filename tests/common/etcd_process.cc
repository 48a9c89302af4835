#include "tests/common/etcd_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

extern char** environ;

namespace dedup::test {
namespace {

// A port that is free on 127.0.0.1 now. etcd cannot listen on port 0, so
// another process may take it before etcd does; Start then fails clearly.
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!bound) return absl::InternalError("cannot bind a port on 127.0.0.1");
  return ntohs(address.sin_port);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// True when etcd at `endpoint` answers a read within a second. etcd's own
// API rather than dedupd's etcd client: the black-box tests link nothing of
// the server.
bool AnswersARead(const std::string& endpoint,
                  const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  std::unique_ptr<etcdserverpb::KV::Stub> kv =
      etcdserverpb::KV::NewStub(grpc::CreateChannel(endpoint, credentials));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  etcdserverpb::RangeRequest request;
  request.set_key("health");
  etcdserverpb::RangeResponse response;
  return kv->Range(&context, request, &response).ok();
}

}  // namespace

EtcdProcess::EtcdProcess(std::string dir, std::string host, int client_port, int peer_port,
                         const EtcdTlsFiles* tls)
    : dir_(std::move(dir)),
      host_(std::move(host)),
      peer_port_(peer_port),
      tls_(tls != nullptr ? std::optional<EtcdTlsFiles>(*tls) : std::nullopt),
      endpoint_(absl::StrCat(host_, ":", client_port)),
      log_path_(dir_ + "/etcd.log") {}

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const std::string& dir,
                                                                const EtcdTlsFiles* tls,
                                                                const std::string& host) {
  absl::StatusOr<int> client_port = FreePort();
  absl::StatusOr<int> peer_port = FreePort();
  if (!client_port.ok()) return client_port.status();
  if (!peer_port.ok()) return peer_port.status();
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess(dir, host, *client_port, *peer_port, tls));
  if (absl::Status launched = etcd->Launch(); !launched.ok()) return launched;
  return etcd;
}

absl::Status EtcdProcess::Restart() {
  if (running()) return absl::FailedPreconditionError("etcd is still running");
  return Launch();
}

absl::Status EtcdProcess::Launch() {
  const std::string client_url =
      absl::StrCat(tls_.has_value() ? "https" : "http", "://", endpoint_);
  const std::string peer_url = absl::StrCat("http://", host_, ":", peer_port_);
  // On a restart etcd finds its member in the data directory and ignores
  // the --initial-* flags.
  std::vector<std::string> args = {ETCD_PATH,
                                   "--name=dedup-test",
                                   absl::StrCat("--data-dir=", dir_, "/etcd-data"),
                                   "--listen-client-urls=" + client_url,
                                   "--advertise-client-urls=" + client_url,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=dedup-test=" + peer_url,
                                   "--log-level=warn"};
  if (tls_.has_value()) {
    args.insert(args.end(), {"--cert-file=" + tls_->cert, "--key-file=" + tls_->key,
                             "--trusted-ca-file=" + tls_->ca, "--client-cert-auth"});
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Appended to, so that the log tells every run.
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return absl::InternalError(absl::StrCat("cannot start ", ETCD_PATH));
  pid_ = pid;

  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls_.has_value()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadText(tls_->ca);
    ssl.pem_cert_chain = ReadText(tls_->client_cert);
    ssl.pem_private_key = ReadText(tls_->client_key);
    credentials = grpc::SslCredentials(ssl);
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    // A new channel each time: one that failed to connect while etcd was
    // starting would wait out gRPC's growing reconnect backoff.
    if (AnswersARead(endpoint_, credentials)) return absl::OkStatus();
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      return absl::InternalError(absl::StrCat("etcd exited at start:\n", Log()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("etcd did not answer in 20 s:\n", Log()));
}

EtcdProcess::~EtcdProcess() {
  if (pid_ == 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

void EtcdProcess::Stop() {
  if (pid_ == 0) return;
  kill(pid_, SIGTERM);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (absl::Now() > give_up) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  pid_ = 0;
}

std::string EtcdProcess::Log() const { return ReadText(log_path_); }

}  // namespace dedup::test
