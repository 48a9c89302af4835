#include "storage/hash_memtable.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/slice.h"
#include "rocksdb/slice_transform.h"

namespace dedup::storage {
namespace {

using rocksdb::MemTableRep;
using rocksdb::Slice;

// An entry: the link to the next entry of its bucket, then the memtable key
// (length-prefixed internal key and value) RocksDB encodes after it.
struct Node {
  std::atomic<Node*> next{nullptr};
  const char* Key() const { return reinterpret_cast<const char*>(this + 1); }
};

// `raw` rounded up to the alignment of T; `raw` must have room for that.
template <typename T>
void* AlignFor(char* raw) {
  const auto address = reinterpret_cast<uintptr_t>(raw);
  return reinterpret_cast<void*>((address + alignof(T) - 1) & ~uintptr_t{alignof(T) - 1});
}

// The parts of a memtable entry (varint32 length, internal key: user key
// then an 8-byte trailer of sequence and type, then the value) that order
// it.
struct OrderedKey {
  std::string_view user_key;
  uint64_t trailer;  // Sequence << 8 | type, written little-endian.
};

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "RocksDB writes the trailer little-endian; it is read here with memcpy");

OrderedKey FromEntry(const char* entry) {
  uint32_t size = 0;
  int shift = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(entry);
  while (*p & 0x80) {
    size |= static_cast<uint32_t>(*p++ & 0x7f) << shift;
    shift += 7;
  }
  size |= static_cast<uint32_t>(*p++) << shift;
  const char* key = reinterpret_cast<const char*>(p);
  uint64_t trailer;
  std::memcpy(&trailer, key + size - 8, 8);
  return {std::string_view(key, size - 8), trailer};
}

// RocksDB's internal-key order over the bytewise user comparator: user
// keys ascending (as unsigned bytes), then the newest (largest trailer)
// first.
int InternalOrder(const OrderedKey& a, const OrderedKey& b) {
  if (const int by_key = a.user_key.compare(b.user_key); by_key != 0) return by_key;
  return a.trailer > b.trailer ? -1 : a.trailer < b.trailer ? 1 : 0;
}

// Eight bytes of `user_key` from `offset` on, as a big-endian number,
// zero-padded past its end: numbers in this order agree with the bytewise
// order of keys that share their first `offset` bytes, and keys whose
// windows are equal need a full comparison.
uint64_t SortWindow(std::string_view user_key, size_t offset) {
  uint64_t window = 0;
  for (size_t i = 0; i < 8; ++i) {
    const size_t at = offset + i;
    const uint64_t byte = at < user_key.size() ? static_cast<unsigned char>(user_key[at]) : 0;
    window |= byte << (8 * (7 - i));
  }
  return window;
}

class HashListRep;

// The entries of one user key, newest first, from the first one a
// snapshot sees: what RocksDB's point read walks (its default
// MemTableRep::Get: Seek, then Next while the entry is of the key sought).
// It walks the key's bucket and skips the entries of other keys. Only
// Seek and Next position it; the other moves leave it invalid.
class BucketIterator final : public MemTableRep::Iterator {
 public:
  explicit BucketIterator(const HashListRep* rep) : rep_(rep) {}
  bool Valid() const override { return node_ != nullptr; }
  const char* key() const override { return node_->Key(); }
  void Next() override;
  void Prev() override { node_ = nullptr; }
  void Seek(const Slice& internal_key, const char* memtable_key) override;
  void SeekForPrev(const Slice&, const char*) override { node_ = nullptr; }
  void SeekToFirst() override { node_ = nullptr; }
  void SeekToLast() override { node_ = nullptr; }

 private:
  // From `node` on, the first entry of user_key_.
  static Node* OfKey(Node* node, std::string_view user_key);

  const HashListRep* const rep_;
  std::string_view user_key_;  // The key sought, in RocksDB's lookup key.
  Node* node_ = nullptr;
};

// Every entry in order, from an array sorted when the iterator was made.
// Entries added after that are not in it; RocksDB's readers do not need
// them, as their sequence numbers are above the reader's snapshot.
// A walk in prefix mode (`by_prefix`) starts empty and, at each Seek and
// SeekForPrev, takes the sorted entries of the target's prefix instead,
// newer ones included (RocksDB skips those by their sequence numbers).
// Destroying it frees the array and, when it lives in a Shell, marks the
// shell free as the last thing it does.
class SortedIterator final : public MemTableRep::Iterator {
 public:
  SortedIterator(const MemTableRep::KeyComparator& compare, const char** keys, size_t count,
                 const HashListRep* by_prefix, std::atomic<bool>* shell_in_use)
      : compare_(compare),
        keys_(keys),
        count_(count),
        pos_(count),
        by_prefix_(by_prefix),
        shell_in_use_(shell_in_use) {}
  ~SortedIterator() override {
    delete[] keys_;
    if (shell_in_use_ != nullptr) shell_in_use_->store(false, std::memory_order_release);
  }

  bool Valid() const override { return pos_ < count_; }
  const char* key() const override { return keys_[pos_]; }
  void Next() override { ++pos_; }
  void Prev() override { pos_ = pos_ == 0 ? count_ : pos_ - 1; }
  void Seek(const Slice& internal_key, const char*) override {
    if (by_prefix_ != nullptr) TakePrefixOf(internal_key);
    pos_ = std::lower_bound(keys_, keys_ + count_, internal_key,
                            [this](const char* entry, const Slice& target) {
                              return compare_(entry, target) < 0;
                            }) -
           keys_;
  }
  void SeekForPrev(const Slice& internal_key, const char*) override {
    if (by_prefix_ != nullptr) TakePrefixOf(internal_key);
    // The last entry at or before the target.
    const size_t after = std::upper_bound(keys_, keys_ + count_, internal_key,
                                          [this](const Slice& target, const char* entry) {
                                            return compare_(entry, target) > 0;
                                          }) -
                         keys_;
    pos_ = after == 0 ? count_ : after - 1;
  }
  // In prefix mode, the ends of the prefix the last seek took (RocksDB's
  // memtable iterator seeks for the previous entry with a Seek and, past
  // the end, a SeekToLast), and nothing before the first seek.
  void SeekToFirst() override { pos_ = 0; }
  void SeekToLast() override { pos_ = count_ == 0 ? 0 : count_ - 1; }

 private:
  // Replaces the array with the entries of the prefix of `internal_key`'s
  // user key.
  void TakePrefixOf(const Slice& internal_key);

  // Only trivially destructible members: once the destructor's body has
  // marked the shell free, another thread may build in it.
  const MemTableRep::KeyComparator& compare_;
  const char** keys_;
  size_t count_;
  size_t pos_;
  const HashListRep* const by_prefix_;
  std::atomic<bool>* const shell_in_use_;
};

// The thread's point read in progress, and the buffer its iterator lives in
// (see the header: RocksDB's default Get never deletes that iterator).
thread_local const HashListRep* point_read_rep = nullptr;
alignas(BucketIterator) thread_local unsigned char point_read_iterator[sizeof(BucketIterator)];

class HashListRep final : public MemTableRep {
 public:
  HashListRep(const KeyComparator& compare, rocksdb::Allocator* allocator,
              const rocksdb::SliceTransform* transform, size_t bucket_count, bool walk_every_insert,
              bool prefix_walks)
      : MemTableRep(allocator),
        compare_(compare),
        transform_(transform),
        bucket_count_(bucket_count),
        buckets_(new std::atomic<Node*>[bucket_count]),
        bytewise_(OrdersBytewise(compare)),
        walk_every_insert_(walk_every_insert),
        prefix_walks_(prefix_walks && transform != nullptr) {
    for (size_t i = 0; i < bucket_count_; ++i)
      buckets_[i].store(nullptr, std::memory_order_relaxed);
  }

  ~HashListRep() override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // RocksDB has destroyed every iterator it asked for by now: a memtable
    // goes only after the readers that referenced it.
    for (Shell* shell : shells_) {
      shell->~Shell();
      ::operator delete(shell);
    }
  }

  rocksdb::KeyHandle Allocate(const size_t len, char** buf) override {
    char* raw = nullptr;
    MemTableRep::Allocate(sizeof(Node) + alignof(Node) - 1 + len, &raw);
    Node* node = new (AlignFor<Node>(raw)) Node;
    *buf = const_cast<char*>(node->Key());
    return node;
  }

  // The single writer. A bucket keeps its entries in no key order; what
  // it keeps is that each user key's entries come newest first, which is
  // what a point read needs. RocksDB's one writer inserts in sequence
  // order, so an entry newer than every entry so far goes first in its
  // bucket without a look at the others (one cache miss, where keeping
  // the bucket in key order read and compared its entries). An older one
  // goes before the first entry of its key that is older still.
  void Insert(rocksdb::KeyHandle handle) override {
    Node* entry = static_cast<Node*>(handle);
    const OrderedKey key = FromEntry(entry->Key());
    std::atomic<Node*>* link = &Bucket(Slice(key.user_key.data(), key.user_key.size()));
    Node* next = link->load(std::memory_order_relaxed);
    const uint64_t sequence = key.trailer >> 8;
    if (sequence >= newest_sequence_ && !walk_every_insert_) {
      newest_sequence_ = sequence;
    } else {
      newest_sequence_ = std::max(newest_sequence_, sequence);
      while (next != nullptr) {
        const OrderedKey there = FromEntry(next->Key());
        if (there.user_key == key.user_key && there.trailer < key.trailer) break;
        link = &next->next;
        next = link->load(std::memory_order_relaxed);
      }
    }
    entry->next.store(next, std::memory_order_relaxed);
    link->store(entry, std::memory_order_release);  // Readers see it whole.
  }

  bool Contains(const char* key) const override {
    const OrderedKey wanted = FromEntry(key);
    for (Node* node = First(Slice(wanted.user_key.data(), wanted.user_key.size())); node != nullptr;
         node = node->next.load(std::memory_order_acquire)) {
      const OrderedKey there = FromEntry(node->Key());
      if (there.user_key == wanted.user_key && there.trailer == wanted.trailer) return true;
    }
    return false;
  }

  // Point reads go through RocksDB's default Get, which seeks the iterator
  // GetDynamicPrefixIterator() gives: during one, that is a BucketIterator
  // in the thread's buffer.
  void Get(const rocksdb::LookupKey& k, void* callback_args,
           bool (*callback_func)(void* arg, const char* entry)) override {
    point_read_rep = this;
    MemTableRep::Get(k, callback_args, callback_func);
    point_read_rep = nullptr;
  }

  size_t ApproximateMemoryUsage() override { return bucket_count_ * sizeof(std::atomic<Node*>); }

  Iterator* GetIterator(rocksdb::Arena* arena) override {
    return NewSortedIterator(arena, SortedEntries(), /*by_prefix=*/false);
  }

  Iterator* GetDynamicPrefixIterator(rocksdb::Arena* arena) override {
    if (arena == nullptr && point_read_rep == this) {
      return new (point_read_iterator) BucketIterator(this);
    }
    if (prefix_walks_) return NewSortedIterator(arena, {}, /*by_prefix=*/true);
    return GetIterator(arena);
  }

  // The entries whose user keys have the prefix of `user_key`, in
  // RocksDB's order: the part of one bucket that a walk in prefix mode sees.
  std::vector<const char*> SortedEntriesOfPrefix(std::string_view user_key) const {
    const std::string_view prefix = PrefixOf(user_key);
    std::vector<const char*> entries;
    for (Node* node = First(Slice(user_key.data(), user_key.size())); node != nullptr;
         node = node->next.load(std::memory_order_acquire)) {
      if (PrefixOf(FromEntry(node->Key()).user_key) == prefix) entries.push_back(node->Key());
    }
    std::sort(entries.begin(), entries.end(), [this](const char* a, const char* b) {
      return bytewise_ ? InternalOrder(FromEntry(a), FromEntry(b)) < 0 : compare_(a, b) < 0;
    });
    return entries;
  }

  // The first entry of the bucket of `user_key`, for readers.
  Node* First(const Slice& user_key) const {
    return Bucket(user_key).load(std::memory_order_acquire);
  }

 private:
  struct Shell {
    std::atomic<bool> in_use{true};
    alignas(SortedIterator) unsigned char storage[sizeof(SortedIterator)];
  };

  // What a key is bucketed by: its prefix, or the whole key where the
  // prefix extractor does not apply to it.
  std::string_view PrefixOf(std::string_view user_key) const {
    const Slice key(user_key.data(), user_key.size());
    if (transform_ == nullptr || !transform_->InDomain(key)) return user_key;
    const Slice prefix = transform_->Transform(key);
    return std::string_view(prefix.data(), prefix.size());
  }

  std::atomic<Node*>& Bucket(const Slice& user_key) const {
    const size_t hash =
        std::hash<std::string_view>{}(PrefixOf(std::string_view(user_key.data(), user_key.size())));
    return buckets_[hash % bucket_count_];
  }

  Iterator* NewSortedIterator(rocksdb::Arena* arena, const std::vector<const char*>& sorted,
                              bool by_prefix) {
    const char** keys = new const char*[sorted.size()];
    std::copy(sorted.begin(), sorted.end(), keys);
    const HashListRep* prefix_rep = by_prefix ? this : nullptr;
    if (arena == nullptr) {
      return new SortedIterator(compare_, keys, sorted.size(), prefix_rep, nullptr);
    }
    // RocksDB destroys an iterator it asked for with an arena but never
    // frees it, and its Arena type is not public: the iterator goes in a
    // shell of this memtable's, marked free again by its destructor.
    Shell* shell = TakeShell();
    return new (shell->storage)
        SortedIterator(compare_, keys, sorted.size(), prefix_rep, &shell->in_use);
  }

  // Every entry, in RocksDB's order. A flush makes this walk of every
  // entry, and a sort that compares entries through RocksDB's comparator
  // reads two entries scattered over the memtable per comparison (a
  // cache miss each, about 17 comparisons per entry at 150,000 entries).
  // With the bytewise comparator, entries are sorted instead by eight
  // bytes of their keys kept beside the pointer, taken after the prefix
  // that every key shares (a namespace, often), and only entries whose
  // eight bytes are equal (versions of one key, mostly) are compared in
  // full.
  std::vector<const char*> SortedEntries() const {
    std::vector<const char*> entries;
    std::string_view first;
    size_t shared = 0;  // Bytes every user key shares with `first`.
    for (size_t i = 0; i < bucket_count_; ++i) {
      for (Node* node = buckets_[i].load(std::memory_order_acquire); node != nullptr;
           node = node->next.load(std::memory_order_acquire)) {
        entries.push_back(node->Key());
        if (!bytewise_) continue;
        const std::string_view user_key = FromEntry(node->Key()).user_key;
        if (entries.size() == 1) {
          first = user_key;
          shared = user_key.size();
        } else {
          const size_t limit = std::min(shared, user_key.size());
          size_t same = 0;
          while (same < limit && first[same] == user_key[same]) ++same;
          shared = same;
        }
      }
    }
    if (!bytewise_) {
      std::sort(entries.begin(), entries.end(),
                [this](const char* a, const char* b) { return compare_(a, b) < 0; });
      return entries;
    }
    struct Keyed {
      uint64_t window;
      const char* entry;
    };
    std::vector<Keyed> keyed;
    keyed.reserve(entries.size());
    for (const char* entry : entries) {
      keyed.push_back({SortWindow(FromEntry(entry).user_key, shared), entry});
    }
    std::sort(keyed.begin(), keyed.end(), [](const Keyed& a, const Keyed& b) {
      if (a.window != b.window) return a.window < b.window;
      return InternalOrder(FromEntry(a.entry), FromEntry(b.entry)) < 0;
    });
    for (size_t i = 0; i < keyed.size(); ++i) entries[i] = keyed[i].entry;
    return entries;
  }

  // Whether `compare` orders entries as InternalOrder does: checked once
  // per memtable on entries whose order tells the bytewise comparator
  // from others (reversed, length first, signed bytes). Every shard
  // family uses the bytewise one; any other gets the plain sort.
  static bool OrdersBytewise(const KeyComparator& compare) {
    const auto entry = [](std::string_view user_key, uint64_t sequence) {
      std::string out(1, static_cast<char>(user_key.size() + 8));
      out.append(user_key);
      const uint64_t trailer = sequence << 8 | 1;  // A value.
      out.append(reinterpret_cast<const char*>(&trailer), 8);
      return out;
    };
    const std::string samples[] = {
        entry("a", 5),  entry("a", 6), entry("ab", 1),   entry("b", 9),
        entry("ba", 2), entry("", 3),  entry("\xff", 4), entry(std::string_view("a\0b", 3), 7)};
    for (const std::string& a : samples) {
      for (const std::string& b : samples) {
        const int theirs = compare(a.data(), b.data());
        const int ours = InternalOrder(FromEntry(a.data()), FromEntry(b.data()));
        if ((theirs < 0) != (ours < 0) || (theirs > 0) != (ours > 0)) return false;
      }
    }
    return true;
  }

  Shell* TakeShell() {
    absl::MutexLock lock(&shells_mu_);
    for (Shell* shell : shells_) {
      bool in_use = false;
      if (shell->in_use.compare_exchange_strong(in_use, true, std::memory_order_acquire)) {
        return shell;
      }
    }
    shells_.push_back(new (::operator new(sizeof(Shell))) Shell);
    return shells_.back();
  }

  const KeyComparator& compare_;
  const rocksdb::SliceTransform* const transform_;
  const size_t bucket_count_;
  const std::unique_ptr<std::atomic<Node*>[]> buckets_;
  const bool bytewise_;           // compare_ is RocksDB's order over bytewise user keys.
  const bool walk_every_insert_;  // Tests: Insert's walk for out-of-order entries, always.
  const bool prefix_walks_;       // Walks in prefix mode sort their prefix's entries alone.
  uint64_t newest_sequence_ = 0;  // The writer's only.
  absl::Mutex shells_mu_;
  std::vector<Shell*> shells_ ABSL_GUARDED_BY(shells_mu_);
};

void SortedIterator::TakePrefixOf(const Slice& internal_key) {
  const std::string_view user_key(internal_key.data(), internal_key.size() - 8);
  const std::vector<const char*> sorted = by_prefix_->SortedEntriesOfPrefix(user_key);
  delete[] keys_;
  keys_ = new const char*[sorted.size()];
  std::copy(sorted.begin(), sorted.end(), keys_);
  count_ = sorted.size();
}

Node* BucketIterator::OfKey(Node* node, std::string_view user_key) {
  while (node != nullptr && FromEntry(node->Key()).user_key != user_key) {
    node = node->next.load(std::memory_order_acquire);
  }
  return node;
}

// The lookup key's trailer holds the snapshot's sequence: entries of the
// key with a larger trailer are newer than the snapshot.
void BucketIterator::Seek(const Slice& internal_key, const char*) {
  uint64_t snapshot;
  std::memcpy(&snapshot, internal_key.data() + internal_key.size() - 8, 8);
  user_key_ = std::string_view(internal_key.data(), internal_key.size() - 8);
  node_ = OfKey(rep_->First(Slice(user_key_.data(), user_key_.size())), user_key_);
  while (node_ != nullptr && FromEntry(node_->Key()).trailer > snapshot) {
    node_ = OfKey(node_->next.load(std::memory_order_acquire), user_key_);
  }
}

void BucketIterator::Next() {
  node_ = OfKey(node_->next.load(std::memory_order_acquire), user_key_);
}

class HashListFactory final : public rocksdb::MemTableRepFactory {
 public:
  HashListFactory(size_t bucket_count, bool walk_every_insert, bool prefix_walks)
      : bucket_count_(bucket_count),
        walk_every_insert_(walk_every_insert),
        prefix_walks_(prefix_walks) {}
  const char* Name() const override { return "DedupHashListMemTable"; }
  MemTableRep* CreateMemTableRep(const MemTableRep::KeyComparator& compare,
                                 rocksdb::Allocator* allocator,
                                 const rocksdb::SliceTransform* transform,
                                 rocksdb::Logger*) override {
    return new HashListRep(compare, allocator, transform, bucket_count_, walk_every_insert_,
                           prefix_walks_);
  }

 private:
  const size_t bucket_count_;
  const bool walk_every_insert_;
  const bool prefix_walks_;
};

}  // namespace

rocksdb::MemTableRepFactory* NewHashListMemTableFactory(size_t bucket_count, bool prefix_walks) {
  return new HashListFactory(std::max<size_t>(bucket_count, 1), /*walk_every_insert=*/false,
                             prefix_walks);
}

rocksdb::MemTableRepFactory* NewHashListMemTableFactoryForTesting(size_t bucket_count,
                                                                  bool walk_every_insert,
                                                                  bool prefix_walks) {
  return new HashListFactory(std::max<size_t>(bucket_count, 1), walk_every_insert, prefix_walks);
}

}  // namespace dedup::storage
