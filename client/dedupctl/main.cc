// dedupctl: the command line over the dedup client library.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cluster_change.h"
#include "cluster_status.h"
#include "dedup/build_info.h"
#include "dedup/client/client.h"
#include "dedup/client/tls.h"
#include "exit_codes.h"
#include "nlohmann/json.hpp"
#include "output.h"

namespace dedup::ctl {
namespace {

constexpr char kUsage[] = R"(dedupctl: talk to a dedupd server.

Usage: dedupctl [global options] COMMAND [arguments] [options]

Commands:
  claim NAMESPACE KEY --owner=ID [--lease=30s] [--fingerprint=BYTES]
  complete NAMESPACE KEY --token=N [--result=BYTES | --result_file=PATH] [--retention=24h]
  release NAMESPACE KEY --token=N
  extend NAMESPACE KEY --token=N [--lease=30s]
  query NAMESPACE KEY
  scan NAMESPACE [--state=in_progress|completed|released|failed] [--older_than=10m] [--limit=N]
  health
  cluster status
  cluster add-node ADDR | remove-node ADDR | move-shard SHARD --to=ADDR | rebalance

Global options (before or after the command):
  --endpoint=HOST:PORT  dedupd address (default $DEDUPD_ENDPOINT, else 127.0.0.1:7400)
  --timeout=5s          deadline of the call, retries included
  --tls_ca=FILE         connect over TLS, verifying dedupd against this CA bundle
  --tls_cert=FILE       with --tls_key: this client's certificate, for mutual TLS
  --tls_key=FILE        its private key
  --bearer_token_file=FILE
                        over TLS, authenticate with the bearer token on this
                        file's first line (for servers with auth grants)
  --json                print the response as JSON (bytes fields in base64)
  --help                this text; `dedupctl COMMAND --help` for one command
  --version             print the version and exit

Exit codes:
  0  ACQUIRED, OK, ALREADY_COMPLETED, record found, server SERVING
  1  the call failed (unreachable, invalid argument, an outcome this dedupctl
     does not know, ...); the reason on stderr
  2  bad command line
  10 IN_PROGRESS   11 COMPLETED   12 FAILED (poisoned)   13 MISMATCH
  14 STALE_TOKEN   15 NOT_FOUND (or ABSENT for query)
  16 cluster status: a shard has no leader, or fewer live replicas than a
     majority (replication_factor/2+1)
  (cluster add-node, remove-node, move-shard, rebalance: 0 done, 1 refused,
     rolled back or not done within --wait)

Examples:
  dedupctl claim coupon-deduct order-1001 --owner=$(hostname)-$$
  dedupctl complete coupon-deduct order-1001 --token=7 --result='{"deducted":true}'
  dedupctl scan coupon-deduct --state=in_progress --older_than=10m --json
  dedupctl --endpoint=10.0.0.5:7400 cluster status
  dedupctl --endpoint=10.0.0.5:7400 cluster add-node dedupd-3.dedupd:7400
)";

struct CommandSpec {
  int positional;                 // Required positional arguments.
  std::set<std::string> options;  // Allowed --options besides the global ones.
  std::set<std::string> required;
  const char* usage;
};

const std::map<std::string, CommandSpec>& Commands() {
  static const auto* commands = new std::map<std::string, CommandSpec>{
      {"claim",
       {2,
        {"owner", "lease", "fingerprint"},
        {"owner"},
        "dedupctl claim NAMESPACE KEY --owner=ID [--lease=30s] [--fingerprint=BYTES]\n"
        "  Claims KEY for OWNER. Prints the token on ACQUIRED (exit 0), the holder on\n"
        "  IN_PROGRESS (10), the stored result on COMPLETED (11); FAILED 12, MISMATCH 13."}},
      {"complete",
       {2,
        {"token", "result", "result_file", "retention"},
        {"token"},
        "dedupctl complete NAMESPACE KEY --token=N [--result=BYTES | --result_file=PATH]\n"
        "                  [--retention=24h]\n"
        "  Marks KEY done with the token of its claim and stores the result for\n"
        "  duplicates. OK or ALREADY_COMPLETED exit 0; STALE_TOKEN 14; NOT_FOUND 15."}},
      {"release",
       {2,
        {"token"},
        {"token"},
        "dedupctl release NAMESPACE KEY --token=N\n"
        "  Gives up a claim so a redelivery can run. OK exit 0; FAILED (this release\n"
        "  poisoned the key) 12; STALE_TOKEN 14; NOT_FOUND 15."}},
      {"extend",
       {2,
        {"token", "lease"},
        {"token"},
        "dedupctl extend NAMESPACE KEY --token=N [--lease=30s]\n"
        "  Renews the lease from now. OK exit 0; STALE_TOKEN 14; NOT_FOUND 15."}},
      {"query",
       {2,
        {},
        {},
        "dedupctl query NAMESPACE KEY\n"
        "  Prints the record. Exit 0 if one is live, 15 if ABSENT."}},
      {"scan",
       {1,
        {"state", "older_than", "limit"},
        {},
        "dedupctl scan NAMESPACE [--state=STATE] [--older_than=DURATION] [--limit=N]\n"
        "  Lists live records, one per line (or one JSON object per line), e.g. claims\n"
        "  stuck for 10 minutes: --state=in_progress --older_than=10m"}},
      {"health",
       {0,
        {},
        {},
        "dedupctl health\n"
        "  Exit 0 if dedupd reports dedup.v1.Dedup SERVING, else 1."}},
      {"cluster",
       {1,
        {"wait", "to", "from", "parallel_moves"},
        {},
        "dedupctl cluster status [--json]\n"
        "  Asks --endpoint, then every node of its cluster map, for its Topology, and\n"
        "  prints one line per shard: its leader (or none), epoch, and each replica's\n"
        "  last seq, applied seq, entries behind the leader and whether it is live, as\n"
        "  the shard's leader reports them. A cluster that is not replicated is shown\n"
        "  with each shard's owner.\n"
        "  Exit 0 when every shard has a leader and a majority (replication_factor/2+1)\n"
        "  of live replicas (not replicated: when every node answered); 16 when not,\n"
        "  each such shard named on stderr; 1 when no endpoint answered."
        "\n\n"
        "Replicated clusters change shape online (docs/elastic.md); each command below\n"
        "prints progress (shards moved of the total, bytes copied, ETA) and waits\n"
        "until the cluster is there, at most --wait (default 30m):\n"
        "dedupctl cluster add-node ADDR [--wait=30m] [--parallel_moves=32]\n"
        "  Waits until the dedupd at ADDR (started with this cluster's etcd, name and\n"
        "  a --cluster_nodes list giving it ADDR) has joined, then rebalances.\n"
        "dedupctl cluster remove-node ADDR [--wait=30m] [--parallel_moves=32]\n"
        "  Marks ADDR draining and moves every shard replica it holds to the other\n"
        "  nodes; exit 0 once it holds none, and it can be stopped. Refused when the\n"
        "  other live nodes are fewer than the replication factor.\n"
        "dedupctl cluster move-shard SHARD --to=ADDR [--from=ADDR] [--wait=30m]\n"
        "  Moves one replica of SHARD to ADDR: from --from, else from the voter holding\n"
        "  the most shards. Exit 1 when refused or rolled back.\n"
        "dedupctl cluster rebalance [--wait=30m] [--parallel_moves=32]\n"
        "  Moves replicas until every live node that is not draining holds within one\n"
        "  of the others.\n"
        "add-node, remove-node and rebalance run up to --parallel_moves (default 32)\n"
        "moves at once; each node sending moves paces all of them together at its\n"
        "--move_bytes_per_second, so small shards move many at a time and large ones\n"
        "copy no faster in all than one."}},
  };
  return *commands;
}

struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  bool json = false;
  bool help = false;
  bool version = false;
};

[[noreturn]] void UsageError(const std::string& message, const char* usage = nullptr) {
  std::cerr << "dedupctl: " << message << "\n"
            << (usage != nullptr ? usage : "Run `dedupctl --help` for usage.") << "\n";
  std::exit(kExitUsage);
}

Args Parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json") {
      args.json = true;
    } else if (arg == "--help" || arg == "-h") {
      args.help = true;
    } else if (arg == "--version") {
      args.version = true;
    } else if (arg.rfind("--", 0) == 0) {
      std::string name = arg.substr(2), value;
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        UsageError(absl::StrCat("--", name, " needs a value"));
      }
      args.options[name] = value;
    } else if (args.command.empty()) {
      args.command = arg;
    } else {
      args.positional.push_back(arg);
    }
  }
  return args;
}

std::string Option(const Args& args, const std::string& name, const std::string& fallback = "") {
  auto it = args.options.find(name);
  return it == args.options.end() ? fallback : it->second;
}

uint64_t TokenOption(const Args& args, const char* usage) {
  uint64_t token = 0;
  if (!absl::SimpleAtoi(Option(args, "token"), &token) || token == 0) {
    UsageError("--token must be a positive integer (the token of an ACQUIRED claim)", usage);
  }
  return token;
}

// Sets `*ms` from a duration option if present; false if absent.
bool DurationOption(const Args& args, const std::string& name, const char* usage, int64_t* ms) {
  const std::string text = Option(args, name);
  if (text.empty()) return false;
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    UsageError(
        absl::StrCat("--", name, " must be a duration such as 30s, 10m or 24h, got '", text, "'"),
        usage);
  }
  *ms = absl::ToInt64Milliseconds(d);
  return true;
}

int Fail(const absl::Status& status) {
  std::cerr << "dedupctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return kExitError;
}

// Prints the response of a call and returns the exit code of its outcome.
template <typename Response>
int Print(const absl::StatusOr<Response>& response, bool json) {
  if (!response.ok()) return Fail(response.status());
  std::cout << Render(*response, json) << "\n";
  const ExitCode code = ExitCodeOf(*response);
  if (code == kExitError) {
    std::cerr << "dedupctl: the answer has an outcome this dedupctl does not know (a newer "
                 "dedupd?); treating it as a failure\n";
  }
  return code;
}

int RunCommand(client::Client& client, const Args& args, const CommandSpec& spec) {
  const std::string& cmd = args.command;
  const bool json = args.json;
  if (cmd == "claim") {
    v1::ClaimRequest r;
    r.set_namespace_(args.positional[0]);
    r.set_key(args.positional[1]);
    r.set_owner(Option(args, "owner"));
    r.set_fingerprint(Option(args, "fingerprint"));
    int64_t lease_ms = 0;
    if (DurationOption(args, "lease", spec.usage, &lease_ms)) r.set_lease_ms(lease_ms);
    return Print(client.Claim(r), json);
  }
  if (cmd == "complete") {
    v1::CompleteRequest r;
    r.set_namespace_(args.positional[0]);
    r.set_key(args.positional[1]);
    r.set_token(TokenOption(args, spec.usage));
    if (const std::string path = Option(args, "result_file"); !path.empty()) {
      std::ifstream in(path, std::ios::binary);
      if (!in) UsageError(absl::StrCat("cannot read --result_file ", path), spec.usage);
      std::stringstream bytes;
      bytes << in.rdbuf();
      r.set_result(bytes.str());
    } else {
      r.set_result(Option(args, "result"));
    }
    int64_t retention_ms = 0;
    if (DurationOption(args, "retention", spec.usage, &retention_ms)) {
      r.set_retention_ms(retention_ms);
    }
    return Print(client.Complete(r), json);
  }
  if (cmd == "release") {
    v1::ReleaseRequest r;
    r.set_namespace_(args.positional[0]);
    r.set_key(args.positional[1]);
    r.set_token(TokenOption(args, spec.usage));
    return Print(client.Release(r), json);
  }
  if (cmd == "extend") {
    v1::ExtendRequest r;
    r.set_namespace_(args.positional[0]);
    r.set_key(args.positional[1]);
    r.set_token(TokenOption(args, spec.usage));
    int64_t lease_ms = 0;
    if (DurationOption(args, "lease", spec.usage, &lease_ms)) r.set_lease_ms(lease_ms);
    return Print(client.Extend(r), json);
  }
  if (cmd == "query") {
    v1::QueryRequest r;
    r.set_namespace_(args.positional[0]);
    r.set_key(args.positional[1]);
    return Print(client.Query(r), json);
  }
  if (cmd == "scan") {
    v1::ScanRequest r;
    r.set_namespace_(args.positional[0]);
    if (const std::string state = Option(args, "state"); !state.empty()) {
      v1::RecordState parsed;
      std::string upper = "STATE_";
      for (char c : state) upper.push_back(static_cast<char>(std::toupper(c)));
      if (!v1::RecordState_Parse(upper, &parsed) || parsed == v1::STATE_ABSENT ||
          parsed == v1::STATE_UNSPECIFIED) {
        UsageError(absl::StrCat("--state must be in_progress, completed, released or failed, "
                                "got '",
                                state, "'"),
                   spec.usage);
      }
      r.set_state(parsed);
    }
    int64_t older_ms = 0;
    if (DurationOption(args, "older_than", spec.usage, &older_ms)) r.set_min_age_ms(older_ms);
    if (const std::string limit = Option(args, "limit"); !limit.empty()) {
      uint64_t n = 0;
      if (!absl::SimpleAtoi(limit, &n)) UsageError("--limit must be a number", spec.usage);
      r.set_limit(n);
    }
    auto records = client.Scan(r);
    if (!records.ok()) return Fail(records.status());
    for (const v1::Record& record : *records) std::cout << Render(record, json) << "\n";
    if (!json) std::cerr << records->size() << " record(s)\n";
    return kExitOk;
  }
  // health
  absl::Status status = client.Health();
  if (!status.ok()) return Fail(status);
  std::cout << (json ? nlohmann::json{{"status", "SERVING"}}.dump() : "SERVING") << "\n";
  return kExitOk;
}

// Options every command takes.
const std::set<std::string> kGlobalOptions = {"endpoint", "timeout", "tls_ca",
                                              "tls_cert", "tls_key", "bearer_token_file"};

int Main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  if (args.version) {
    std::cout << "dedupctl " << kVersion << "\n";
    return kExitOk;
  }
  if (args.command.empty()) {
    if (args.help) {
      std::cout << kUsage;
      return kExitOk;
    }
    UsageError("no command given");
  }
  auto it = Commands().find(args.command);
  if (it == Commands().end()) UsageError(absl::StrCat("unknown command '", args.command, "'"));
  const CommandSpec& spec = it->second;
  if (args.help) {
    std::cout << spec.usage << "\n";
    return kExitOk;
  }
  const bool cluster_change =
      args.command == "cluster" && !args.positional.empty() && args.positional[0] != "status";
  const int wanted = !cluster_change                       ? spec.positional
                     : (args.positional[0] == "rebalance") ? 1
                                                           : 2;
  if (static_cast<int>(args.positional.size()) != wanted) {
    UsageError(
        absl::StrCat(args.command, " takes ", wanted, " argument(s), got ", args.positional.size()),
        spec.usage);
  }
  for (const auto& [name, value] : args.options) {
    if (kGlobalOptions.count(name) == 0 && spec.options.count(name) == 0) {
      UsageError(absl::StrCat("unknown option --", name, " for ", args.command), spec.usage);
    }
  }
  for (const std::string& name : spec.required) {
    if (args.options.count(name) == 0) {
      UsageError(absl::StrCat(args.command, " needs --", name), spec.usage);
    }
  }
  static const std::set<std::string> kClusterCommands = {"status", "add-node", "remove-node",
                                                         "move-shard", "rebalance"};
  if (args.command == "cluster" && kClusterCommands.count(args.positional[0]) == 0) {
    UsageError(absl::StrCat("unknown cluster command '", args.positional[0], "'"), spec.usage);
  }
  if (args.command == "cluster" && args.positional[0] != "move-shard" &&
      (args.options.count("to") || args.options.count("from"))) {
    UsageError("--to and --from belong to cluster move-shard", spec.usage);
  }
  if (args.command == "cluster" && args.positional[0] == "move-shard" &&
      Option(args, "to").empty()) {
    UsageError("cluster move-shard needs --to=ADDR", spec.usage);
  }

  client::ClientOptions options;
  const char* env = std::getenv("DEDUPD_ENDPOINT");
  options.endpoint = Option(args, "endpoint", env != nullptr ? env : "127.0.0.1:7400");
  options.coalesce = false;  // One call: nothing to coalesce with.
  const client::TlsFiles tls{Option(args, "tls_ca"), Option(args, "tls_cert"),
                             Option(args, "tls_key")};
  if (!tls.ca.empty() || !tls.cert.empty() || !tls.key.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        client::TlsCredentials(tls);
    if (!credentials.ok()) UsageError(std::string(credentials.status().message()));
    options.credentials = *credentials;
  }
  if (const std::string bearer = Option(args, "bearer_token_file"); !bearer.empty()) {
    if (options.credentials == nullptr) {
      UsageError(
          "--bearer_token_file needs TLS (--tls_ca): a bearer token is never sent in "
          "plaintext");
    }
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        client::WithBearerTokenFile(options.credentials, bearer);
    if (!credentials.ok()) UsageError(std::string(credentials.status().message()));
    options.credentials = *credentials;
  }
  int64_t timeout_ms = 0;
  if (DurationOption(args, "timeout", spec.usage, &timeout_ms)) {
    if (timeout_ms <= 0) UsageError("--timeout must be positive", spec.usage);
    options.default_timeout = absl::Milliseconds(timeout_ms);
  }
  if (cluster_change) {
    ChangeContext change;
    change.endpoints = options.endpoint;
    change.credentials = options.credentials;
    change.call_timeout = options.default_timeout;
    int64_t wait_ms = 0;
    if (DurationOption(args, "wait", spec.usage, &wait_ms)) {
      if (wait_ms <= 0) UsageError("--wait must be positive", spec.usage);
      change.wait = absl::Milliseconds(wait_ms);
    }
    if (const std::string parallel = Option(args, "parallel_moves"); !parallel.empty()) {
      if (!absl::SimpleAtoi(parallel, &change.parallel_moves) || change.parallel_moves < 1 ||
          change.parallel_moves > 256) {
        UsageError(
            absl::StrCat("--parallel_moves must be a number from 1 to 256, not '", parallel, "'"),
            spec.usage);
      }
    }
    change.out = &std::cout;
    change.err = &std::cerr;
    const std::string& what = args.positional[0];
    if (what == "rebalance") return RunRebalance(change);
    if (what == "add-node") return RunAddNode(change, args.positional[1]);
    if (what == "remove-node") return RunRemoveNode(change, args.positional[1]);
    uint32_t shard = 0;
    if (!absl::SimpleAtoi(args.positional[1], &shard)) {
      UsageError(
          absl::StrCat("cluster move-shard: '", args.positional[1], "' is not a shard number"),
          spec.usage);
    }
    return RunMoveShard(change, shard, Option(args, "to"), Option(args, "from"));
  }
  if (args.command == "cluster") {
    return RunClusterStatus(options.endpoint, options.credentials, options.default_timeout,
                            args.json, std::cout, std::cerr);
  }
  absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Create(options);
  if (!client.ok()) return Fail(client.status());
  return RunCommand(**client, args, spec);
}

}  // namespace
}  // namespace dedup::ctl

int main(int argc, char** argv) { return dedup::ctl::Main(argc, argv); }
