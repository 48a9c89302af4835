// Fuzzes the configuration file path of dedupd: ParseConfigText, then
// ResolveSettings (server/server_settings.h), on arbitrary text.
//
// Invariants:
// - Settings that resolve are within every bound the configuration
//   documents (design.md §4 and §6, server_config.proto): policies with
//   1 <= lease_default <= lease_max and retention_floor <= retention_default,
//   every duration at most ten years, sizes and counts in their ranges, a
//   node index inside the node list, plaintext only on loopback unless
//   acknowledged.
// - A refused configuration names the offending field: the error starts
//   with a path of ServerConfig fields, such as
//   "namespaces[1].policy.lease_max", that exists in the schema.
// - The parsed configuration, printed in text format and parsed again,
//   resolves to the same answer.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "dedup/v1/server_config.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/namespace_policy.h"
#include "server/server_settings.h"

namespace {

using dedup::server::kMaxConfigDurationMs;
using dedup::server::Policy;
using dedup::server::ServerSettings;
namespace v1 = dedup::v1;

void Check(bool condition) {
  if (!condition) std::abort();
}

void CheckPolicy(const Policy& p) {
  Check(p.lease_default_ms >= 1 && p.lease_default_ms <= p.lease_max_ms);
  Check(p.lease_max_ms <= kMaxConfigDurationMs);
  Check(p.retention_floor_ms >= 0 && p.retention_floor_ms <= p.retention_default_ms);
  Check(p.retention_default_ms >= 1 && p.retention_default_ms <= kMaxConfigDurationMs);
  Check(p.max_result_bytes >= 1 && p.max_result_bytes <= 3 * 1024 * 1024);
  Check(p.max_attempts >= 1);
}

bool InRange(int64_t ms, int64_t min) { return ms >= min && ms <= kMaxConfigDurationMs; }

void CheckSettings(const v1::ServerConfig& config, const ServerSettings& s) {
  Check(s.policies != nullptr);
  // The default policy, which undeclared namespaces use unless the server is strict.
  const absl::StatusOr<const Policy*> fallback = s.policies->Find("undeclared.namespace");
  if (!s.policies->declared().contains("undeclared.namespace")) {
    Check(fallback.ok() != s.policies->strict());
    if (fallback.ok()) CheckPolicy(**fallback);
  }
  Check(static_cast<int>(s.policies->declared().size()) == config.namespaces_size());
  for (const auto& [name, policy] : s.policies->declared()) {
    Check(dedup::server::ValidateNamespaceName(name, "name").ok());
    CheckPolicy(policy);
  }
  Check(s.policies->strict() == config.strict_namespaces());
  Check(s.max_key_bytes >= 1 && s.max_key_bytes <= 64 * 1024);
  Check(s.workers >= 1 && s.workers <= 1024);
  Check(InRange(s.shutdown_grace_ms, 0) && InRange(s.stats_interval_ms, 100));
  Check(s.store.shards <= 4096);
  Check(InRange(s.store.buffered_sync_interval_ms, 1) && InRange(s.store.abandoned_grace_ms, 0));
  Check(!s.store.path.empty() && !s.listen.empty());
  const dedup::server::ServerLimits& l = s.limits;
  Check(l.max_queued_tasks >= 1 && l.max_stream_batches >= 1 && l.scan_workers >= 1 &&
        l.scan_workers <= 64 && l.scan_max_examined >= 1 && l.max_concurrent_streams >= 1);
  Check(l.max_batch_answer_bytes >= 64 * 1024 &&
        l.max_batch_answer_bytes + (1u << 19) <= l.max_send_message_bytes);
  Check(InRange(l.keepalive_time_ms, 1000) && InRange(l.keepalive_timeout_ms, 1000) &&
        InRange(l.min_client_ping_interval_ms, 0));
  if (s.cluster_nodes.empty()) {
    Check(s.node_index == 0);
  } else {
    Check(s.node_index < s.cluster_nodes.size());
    for (const std::string& node : s.cluster_nodes) Check(!node.empty());
  }
  Check(s.tls.cert.empty() == s.tls.key.empty());
  Check(s.tls.enabled() || s.tls.ca.empty());
  Check(s.tls.enabled() || dedup::server::IsLoopbackListen(s.listen) || config.insecure());
  Check(!dedup::server::DescribeSettings(s).empty());
}

// Whether `message` starts with a path of fields of ServerConfig
// (name, name[i], name.name...) followed by ':', ' ' or the end.
bool NamesAField(absl::string_view message) {
  const google::protobuf::Descriptor* type = v1::ServerConfig::descriptor();
  while (true) {
    size_t n = 0;
    while (n < message.size() && (absl::ascii_islower(message[n]) || message[n] == '_')) ++n;
    if (type == nullptr || n == 0) return false;
    const google::protobuf::FieldDescriptor* field =
        type->FindFieldByName(std::string(message.substr(0, n)));
    if (field == nullptr) return false;
    message.remove_prefix(n);
    if (!message.empty() && message[0] == '[') {
      if (!field->is_repeated()) return false;
      const size_t close = message.find(']');
      if (close == absl::string_view::npos) return false;
      message.remove_prefix(close + 1);
    }
    if (message.empty() || message[0] == ':' || message[0] == ' ') return true;
    if (message[0] != '.') return false;
    message.remove_prefix(1);
    type = field->message_type();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Parse errors of the text format go to the caller, not to the log.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<v1::ServerConfig> config = dedup::server::ParseConfigText(text);
  if (!config.ok()) {
    Check(config.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const absl::StatusOr<ServerSettings> settings = dedup::server::ResolveSettings(*config);
  if (settings.ok()) {
    CheckSettings(*config, *settings);
  } else {
    Check(settings.status().code() == absl::StatusCode::kInvalidArgument);
    Check(NamesAField(settings.status().message()));
  }

  std::string printed;
  Check(google::protobuf::TextFormat::PrintToString(*config, &printed));
  const absl::StatusOr<v1::ServerConfig> reparsed = dedup::server::ParseConfigText(printed);
  Check(reparsed.ok());
  Check(google::protobuf::util::MessageDifferencer::Equals(*config, *reparsed));
  const absl::StatusOr<ServerSettings> again = dedup::server::ResolveSettings(*reparsed);
  Check(again.status() == settings.status());
  return 0;
}
