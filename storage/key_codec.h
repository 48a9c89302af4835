#ifndef DEDUP_STORAGE_KEY_CODEC_H_
#define DEDUP_STORAGE_KEY_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace dedup::storage {

// Storage keys are namespace + '\0' + key. Namespaces never contain '\0'
// (the server validates them), so the encoding is unambiguous and all keys
// of a namespace are contiguous within a shard.
std::string EncodeStorageKey(absl::string_view ns, absl::string_view key);

// The prefix shared by every storage key of `ns`.
std::string NamespacePrefix(absl::string_view ns);

// Splits a storage key; false if it has no separator.
bool DecodeStorageKey(absl::string_view storage_key, std::string* ns, std::string* key);

// FNV-1a 64 over namespace, one 0x00 byte, key. Stable across versions,
// platforms and languages: clients compute it to route keys to shards.
uint64_t KeyHash(absl::string_view ns, absl::string_view key);

// The shard owning (ns, key) among `shard_count` shards.
uint32_t ShardOf(absl::string_view ns, absl::string_view key, uint32_t shard_count);
// The same, from a KeyHash already computed.
uint32_t ShardOfHash(uint64_t key_hash, uint32_t shard_count);

// The node that owns `shard` in a statically sharded cluster of
// `node_count` nodes: node i owns the shards s with s mod n == i. Requires
// node_count >= 1. Server and client both route with this one rule.
uint32_t NodeOfShard(uint32_t shard, uint32_t node_count);

// Column family name of shard `index`: "shard-0007".
std::string ShardName(uint32_t index);

// Where several shards share a column family (data_dir.h), every key of
// shard `index` there starts with this: the index, 4 bytes big-endian, so
// that each shard is one contiguous range and the ranges sort by index.
std::string ShardKeyPrefix(uint32_t index);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_KEY_CODEC_H_
