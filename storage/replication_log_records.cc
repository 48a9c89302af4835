// ReplicationLog: re-seeding a shard from a copy of its records
// (docs/replication.md §4). The source's walk of the records, and the
// re-seeded replica's writes of them; clearing the shard before and
// setting its position after are in replication_log.cc.

#include <utility>

#include "absl/strings/str_cat.h"
#include "rocksdb/iterator.h"
#include "rocksdb/write_batch.h"
#include "storage/data_dir.h"
#include "storage/replication_log.h"
#include "storage/rocks_status.h"

namespace dedup::storage {

struct ReplicationLog::RecordWalk::Iteration {
  uint32_t shard = 0;
  std::string prefix;  // The shard's range of its family; pages carry storage keys.
  std::string end;
  rocksdb::Slice lower, upper;
  std::unique_ptr<rocksdb::Iterator> it;
  bool failed = false;
};

ReplicationLog::RecordWalk::RecordWalk(std::unique_ptr<Iteration> iteration)
    : iteration_(std::move(iteration)) {}

ReplicationLog::RecordWalk::~RecordWalk() = default;

std::unique_ptr<ReplicationLog::RecordWalk> ReplicationLog::WalkRecords(
    uint32_t shard, const std::string& after_key) const {
  auto walk = std::make_unique<RecordWalk::Iteration>();
  walk->shard = shard;
  walk->prefix = dir_->shard_prefix(shard);
  walk->end = dir_->ShardEnd(shard);
  walk->lower = rocksdb::Slice(walk->prefix);
  walk->upper = rocksdb::Slice(walk->end);
  rocksdb::ReadOptions ordered;
  ordered.total_order_seek = true;  // Past a hash memtable's buckets.
  if (!walk->end.empty()) {
    // The bounds are read for as long as the iterator lives.
    ordered.iterate_lower_bound = &walk->lower;
    ordered.iterate_upper_bound = &walk->upper;
  }
  walk->it.reset(dir_->db()->NewIterator(ordered, dir_->shard(shard)));
  const std::string begin = dir_->RecordKey(shard, after_key);
  walk->it->Seek(begin);
  if (!after_key.empty() && walk->it->Valid() && walk->it->key() == rocksdb::Slice(begin)) {
    walk->it->Next();
  }
  return std::unique_ptr<RecordWalk>(new RecordWalk(std::move(walk)));
}

absl::StatusOr<ReplicationLog::RecordPage> ReplicationLog::RecordWalk::Next(size_t max_bytes) {
  Iteration& walk = *iteration_;
  rocksdb::Iterator& it = *walk.it;
  RecordPage page;
  size_t bytes = 0;
  if (!walk.failed) {
    for (; it.Valid(); it.Next()) {
      rocksdb::Slice key = it.key();
      key.remove_prefix(walk.prefix.size());
      if (!page.records.empty() && bytes + key.size() + it.value().size() > max_bytes) {
        page.last_key = page.records.back().first;
        return page;
      }
      page.records.emplace_back(key.ToString(), it.value().ToString());
      bytes += key.size() + it.value().size();
    }
  }
  absl::Status s = FromRocks(it.status(), absl::StrCat("reading shard ", walk.shard, "'s records"));
  if (!s.ok()) {
    walk.failed = true;
    return s;
  }
  page.done = true;
  if (!page.records.empty()) page.last_key = page.records.back().first;
  return page;
}

absl::StatusOr<ReplicationLog::RecordPage> ReplicationLog::ReadRecords(uint32_t shard,
                                                                       const std::string& after_key,
                                                                       size_t max_bytes) const {
  return WalkRecords(shard, after_key)->Next(max_bytes);
}

absl::Status ReplicationLog::RestoreRecords(
    uint32_t shard, const std::vector<std::pair<std::string, std::string>>& records) {
  rocksdb::WriteBatch batch;
  for (const auto& [key, value] : records) {
    batch.Put(dir_->shard(shard), dir_->RecordKey(shard, key), value);
  }
  return FromRocks(dir_->db()->Write(rocksdb::WriteOptions(), &batch),
                   absl::StrCat("restoring shard ", shard, "'s records"));
}

}  // namespace dedup::storage
