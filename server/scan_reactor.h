#ifndef DEDUP_SERVER_SCAN_REACTOR_H_
#define DEDUP_SERVER_SCAN_REACTOR_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "dedup/v1/dedup.grpc.pb.h"
#include "server/metrics.h"
#include "storage/store.h"

namespace dedup::server {

class DedupService;

// One Scan call: reads a page of records on the worker pool, writes them one
// by one, then reads the next page, so memory stays bounded however large
// the namespace. A page examines at most limits().scan_max_examined stored
// records, so one worker step is bounded even when few records match, and
// cancellation is checked before every page and every write. Only one step is ever outstanding, so
// no lock is needed. Deletes itself in OnDone.
class ScanReactor final : public grpc::ServerWriteReactor<v1::Record> {
 public:
  static constexpr size_t kPageSize = 256;

  // Scans as `request` asks, or finishes at once with `admission` when it
  // is an error (a caller refused by authorization).
  ScanReactor(DedupService* service, const v1::ScanRequest& request, const grpc::Status& admission);

  void OnWriteDone(bool ok) override;
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override { delete this; }

 private:
  void FetchPage();
  void WriteNext();
  // Finishes the call and counts it.
  void Done(const grpc::Status& status);

  DedupService* const service_;
  const std::string ns_;  // As requested, for the latency label.
  storage::ScanQuery query_;
  uint64_t limit_ = 0;  // 0: no limit.
  uint64_t written_ = 0;
  storage::ScanCursor cursor_;
  std::vector<v1::Record> page_;
  size_t next_ = 0;
  std::atomic<bool> cancelled_{false};
  const RequestStart start_ = NowForLatency();
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_SCAN_REACTOR_H_
