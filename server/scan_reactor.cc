#include "server/scan_reactor.h"

#include "server/dedup_service.h"
#include "server/proto_mapping.h"
#include "server/response_builder.h"
#include "server/status_convert.h"

namespace dedup::server {

ScanReactor::ScanReactor(DedupService* service, const v1::ScanRequest& request,
                         const grpc::Status& admission)
    : service_(service), ns_(request.namespace_()), limit_(request.limit()) {
  service_->metrics()->RequestStarted();
  if (!admission.ok()) {
    Done(admission);
    return;
  }
  absl::StatusOr<const Policy*> policy = service_->translator().Resolve(request.namespace_());
  absl::StatusOr<storage::State> state = StateFilterFromProto(request.state());
  absl::Status invalid = !policy.ok() ? policy.status() : state.status();
  if (!invalid.ok()) {
    Done(ToGrpcStatus(invalid));
    return;
  }
  query_.ns = request.namespace_();
  query_.state = *state;
  query_.min_age_ms =
      static_cast<int64_t>(std::min<uint64_t>(request.min_age_ms(), kMaxRetentionMs));
  FetchPage();
}

void ScanReactor::FetchPage() {
  const grpc::Status queued = service_->SubmitScan([this] {
    if (cancelled_) {
      Done(grpc::Status::CANCELLED);
      return;
    }
    absl::StatusOr<storage::ScanPage> page =
        service_->store()->Scan(query_, cursor_, kPageSize, service_->limits().scan_max_examined);
    if (!page.ok()) {
      Done(ToGrpcStatus(page.status()));
      return;
    }
    cursor_ = page->next;
    page_.clear();
    next_ = 0;
    for (const storage::Record& record : page->records) {
      FillRecord(record, &page_.emplace_back());
    }
    WriteNext();
  });
  if (!queued.ok()) Done(queued);
}

void ScanReactor::WriteNext() {
  if (cancelled_) {
    Done(grpc::Status::CANCELLED);
    return;
  }
  const bool limit_reached = limit_ != 0 && written_ >= limit_;
  if (!limit_reached && next_ < page_.size()) {
    ++written_;
    StartWrite(&page_[next_++]);
    return;
  }
  if (limit_reached || cursor_.done) {
    Done(grpc::Status::OK);
    return;
  }
  FetchPage();
}

void ScanReactor::Done(const grpc::Status& status) {
  service_->RecordRequest(Method::kScan, ns_, start_, status);
  Finish(status);
}

void ScanReactor::OnWriteDone(bool ok) {
  if (!ok) {
    Done(grpc::Status::CANCELLED);
    return;
  }
  WriteNext();
}

}  // namespace dedup::server
