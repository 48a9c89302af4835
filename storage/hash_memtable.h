#ifndef DEDUP_STORAGE_HASH_MEMTABLE_H_
#define DEDUP_STORAGE_HASH_MEMTABLE_H_

#include <cstddef>

#include "rocksdb/memtablerep.h"

namespace dedup::storage {

// A memtable of hash buckets, each a singly linked list, for shard
// families whose keys come in random order (StoreOptions::hash_memtable):
//  - a write hashes the key's prefix (the family's prefix extractor) to a
//    bucket and, being newer than every entry so far, goes first in it:
//    a bucket keeps each key's entries newest first, and no key order;
//  - a point read walks one bucket for the entries of its key;
//  - an ordered walk (a flush, a scan) sorts an array of the entries once,
//    by eight bytes of each key kept beside its pointer;
//  - with `prefix_walks`, a walk RocksDB makes in prefix mode (a reader
//    that did not ask for total order, on a family with a prefix
//    extractor) sorts only the entries of the prefix it seeks, from that
//    prefix's bucket: it sees that prefix alone (SeekToFirst and
//    SeekToLast go to the ends of the prefix last sought, and see nothing
//    before a seek), as RocksDB's prefix mode allows. Without it, such a
//    walk sorts the whole memtable like any other.
//
// It does for this store what RocksDB's hash skip list did, without two
// costs measured there (bench/RESULTS.md "A memtable of our own"):
// Debian's RocksDB is built with its assertions on, and the hash skip
// list asserts on every insert that the key is not there yet, a second
// lookup per write; and its ordered walk inserts every entry into a new
// skip list first.
//
// One writer at a time (RocksDB's allow_concurrent_memtable_write off);
// readers run concurrently with it. Entries are never removed.
//
// Two parts of RocksDB 7.8's memtable interface are not public, and shape
// this:
//  - point reads go through RocksDB's default MemTableRep::Get, as its key
//    type (LookupKey) is internal. That Get never deletes the iterator it
//    asks for, so during a point read the iterator lives in a buffer of the
//    calling thread, reused by its next read. Any other caller gets an
//    iterator of its own, as the interface says;
//  - an iterator RocksDB asks for with an arena is destroyed by RocksDB
//    and never freed, and its Arena type is internal: such an iterator
//    lives in storage the memtable keeps and reuses, freed with it.
rocksdb::MemTableRepFactory* NewHashListMemTableFactory(size_t bucket_count,
                                                        bool prefix_walks = false);

// For tests: with `walk_every_insert`, every insert takes the walk meant
// for an entry older than one already in the memtable, which RocksDB's
// single writer never inserts, so that the walk is tested too.
rocksdb::MemTableRepFactory* NewHashListMemTableFactoryForTesting(size_t bucket_count,
                                                                  bool walk_every_insert,
                                                                  bool prefix_walks = false);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_HASH_MEMTABLE_H_
