#include "storage/key_codec.h"

#include "absl/strings/str_format.h"

namespace dedup::storage {

std::string EncodeStorageKey(absl::string_view ns, absl::string_view key) {
  std::string out = NamespacePrefix(ns);
  out.append(key.data(), key.size());
  return out;
}

std::string NamespacePrefix(absl::string_view ns) {
  std::string out(ns);
  out.push_back('\0');
  return out;
}

bool DecodeStorageKey(absl::string_view storage_key, std::string* ns, std::string* key) {
  const size_t sep = storage_key.find('\0');
  if (sep == absl::string_view::npos) return false;
  *ns = std::string(storage_key.substr(0, sep));
  *key = std::string(storage_key.substr(sep + 1));
  return true;
}

uint64_t KeyHash(absl::string_view ns, absl::string_view key) {
  constexpr uint64_t kOffset = 14695981039346656037ull;
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h = kOffset;
  auto mix = [&h](absl::string_view bytes) {
    for (char c : bytes) {
      h ^= static_cast<uint8_t>(c);
      h *= kPrime;
    }
  };
  mix(ns);
  mix(absl::string_view("\0", 1));
  mix(key);
  return h;
}

uint32_t ShardOf(absl::string_view ns, absl::string_view key, uint32_t shard_count) {
  return ShardOfHash(KeyHash(ns, key), shard_count);
}

uint32_t ShardOfHash(uint64_t key_hash, uint32_t shard_count) {
  return static_cast<uint32_t>(key_hash % shard_count);
}

uint32_t NodeOfShard(uint32_t shard, uint32_t node_count) { return shard % node_count; }

std::string ShardName(uint32_t index) { return absl::StrFormat("shard-%04d", index); }

std::string ShardKeyPrefix(uint32_t index) {
  return std::string{static_cast<char>(index >> 24), static_cast<char>(index >> 16),
                     static_cast<char>(index >> 8), static_cast<char>(index)};
}

}  // namespace dedup::storage
