#include "server/cluster/etcd_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "server/cluster/cluster_channel.h"

namespace dedup::server::cluster {
namespace {

EtcdKeyValue FromProto(const mvccpb::KeyValue& kv) {
  return EtcdKeyValue{kv.key(),          kv.value(),   kv.create_revision(),
                      kv.mod_revision(), kv.version(), kv.lease()};
}

// The end of the range of every key that starts with `prefix`: the prefix
// with its last byte below 0xff incremented ("\0" when there is none: every
// key from the prefix on).
std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace

EtcdClient::EtcdClient(const EtcdOptions& options) : call_timeout_(options.call_timeout) {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials();
  for (const std::string& endpoint : options.endpoints) {
    std::shared_ptr<grpc::Channel> channel = ClusterChannel(endpoint, credentials);
    members_.push_back(Member{endpoint, etcdserverpb::KV::NewStub(channel),
                              etcdserverpb::Lease::NewStub(channel)});
  }
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(const EtcdOptions& options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd endpoints: at least one host:port is needed");
  }
  for (const std::string& endpoint : options.endpoints) {
    if (endpoint.empty()) return absl::InvalidArgumentError("etcd endpoints: empty endpoint");
  }
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd call timeout: must be positive");
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(options));
}

template <typename Call>
absl::Status EtcdClient::Invoke(absl::string_view method, Call call) {
  const absl::Time deadline = absl::Now() + call_timeout_;
  grpc::Status status;
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& member = members_[i];
    // Each member left gets an equal share of the time left, so one that
    // never answers cannot use up the others' time.
    const absl::Time now = absl::Now();
    const absl::Time attempt_deadline =
        now + (deadline - now) / static_cast<int64_t>(members_.size() - i);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(attempt_deadline));
    status = call(member, &context);
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED) {
      continue;  // This member did not answer: try the next.
    }
    if (status.ok()) return absl::OkStatus();
    return absl::Status(
        static_cast<absl::StatusCode>(code),
        absl::StrCat("etcd ", method, " at ", member.endpoint, ": ", status.error_message()));
  }
  return absl::UnavailableError(absl::StrCat(
      "etcd ", method, ": no member answered within ", absl::FormatDuration(call_timeout_),
      " (last, ", members_.back().endpoint, ": ", status.error_message(), ")"));
}

absl::StatusOr<std::optional<EtcdKeyValue>> EtcdClient::Get(absl::string_view key) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::RangeResponse response;
  absl::Status status = Invoke("Range", [&](Member& m, grpc::ClientContext* context) {
    return m.kv->Range(context, request, &response);
  });
  if (!status.ok()) return status;
  if (response.kvs_size() == 0) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(FromProto(response.kvs(0)));
}

absl::StatusOr<std::vector<EtcdKeyValue>> EtcdClient::GetPrefix(absl::string_view prefix) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(prefix));
  request.set_range_end(PrefixEnd(prefix));
  etcdserverpb::RangeResponse response;
  absl::Status status = Invoke("Range", [&](Member& m, grpc::ClientContext* context) {
    return m.kv->Range(context, request, &response);
  });
  if (!status.ok()) return status;
  std::vector<EtcdKeyValue> out;
  out.reserve(response.kvs_size());
  for (const mvccpb::KeyValue& kv : response.kvs()) out.push_back(FromProto(kv));
  return out;
}

absl::StatusOr<int64_t> EtcdClient::Put(absl::string_view key, absl::string_view value,
                                        int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  absl::Status status = Invoke("Put", [&](Member& m, grpc::ClientContext* context) {
    return m.kv->Put(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.header().revision();
}

absl::StatusOr<bool> EtcdClient::CompareAndPut(absl::string_view key, absl::string_view value,
                                               int64_t expected_mod_revision, int64_t lease) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* compare = request.add_compare();
  compare->set_key(std::string(key));
  compare->set_target(etcdserverpb::Compare::MOD);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_mod_revision(expected_mod_revision);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(std::string(key));
  put->set_value(std::string(value));
  put->set_lease(lease);
  etcdserverpb::TxnResponse response;
  absl::Status status = Invoke("Txn", [&](Member& m, grpc::ClientContext* context) {
    return m.kv->Txn(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.succeeded();
}

absl::StatusOr<bool> EtcdClient::Txn(const std::vector<EtcdCompare>& compares,
                                     const std::vector<EtcdWrite>& writes) {
  etcdserverpb::TxnRequest request;
  for (const EtcdCompare& c : compares) {
    etcdserverpb::Compare* compare = request.add_compare();
    compare->set_key(c.key);
    compare->set_result(etcdserverpb::Compare::EQUAL);
    if (c.value.has_value()) {
      compare->set_target(etcdserverpb::Compare::VALUE);
      compare->set_value(*c.value);
    } else {
      compare->set_target(etcdserverpb::Compare::MOD);
      compare->set_mod_revision(c.mod_revision);
    }
  }
  for (const EtcdWrite& w : writes) {
    etcdserverpb::RequestOp* op = request.add_success();
    if (w.remove) {
      op->mutable_request_delete_range()->set_key(w.key);
    } else {
      etcdserverpb::PutRequest* put = op->mutable_request_put();
      put->set_key(w.key);
      put->set_value(w.value);
      put->set_lease(w.lease);
    }
  }
  etcdserverpb::TxnResponse response;
  absl::Status status = Invoke("Txn", [&](Member& m, grpc::ClientContext* context) {
    return m.kv->Txn(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.succeeded();
}

absl::StatusOr<int64_t> EtcdClient::Delete(absl::string_view key) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::DeleteRangeResponse response;
  absl::Status status = Invoke("DeleteRange", [&](Member& m, grpc::ClientContext* context) {
    return m.kv->DeleteRange(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.deleted();
}

absl::StatusOr<EtcdLease> EtcdClient::GrantLease(absl::Duration ttl) {
  if (ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("etcd lease TTL: at least 1s (etcd counts whole seconds)");
  }
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(absl::ToInt64Seconds(ttl));
  etcdserverpb::LeaseGrantResponse response;
  absl::Status status = Invoke("LeaseGrant", [&](Member& m, grpc::ClientContext* context) {
    return m.lease->LeaseGrant(context, request, &response);
  });
  if (!status.ok()) return status;
  if (!response.error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd LeaseGrant: ", response.error()));
  }
  return EtcdLease{response.id(), absl::Seconds(response.ttl())};
}

absl::Status EtcdClient::RevokeLease(int64_t id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(id);
  etcdserverpb::LeaseRevokeResponse response;
  return Invoke("LeaseRevoke", [&](Member& m, grpc::ClientContext* context) {
    return m.lease->LeaseRevoke(context, request, &response);
  });
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAliveOnce(int64_t id) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(id);
  etcdserverpb::LeaseKeepAliveResponse response;
  bool answered = false;
  absl::Status status = Invoke("LeaseKeepAlive", [&](Member& m, grpc::ClientContext* context) {
    auto stream = m.lease->LeaseKeepAlive(context);
    answered = stream->Write(request) && stream->Read(&response);
    stream->WritesDone();
    if (!answered) context->TryCancel();
    grpc::Status finished = stream->Finish();
    if (answered) return grpc::Status::OK;
    return finished.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream closed") : finished;
  });
  if (!status.ok()) return status;
  if (response.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", id, " has ended"));
  }
  return absl::Seconds(response.ttl());
}

}  // namespace dedup::server::cluster
