#include "storage/key_codec.h"

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace dedup::storage {
namespace {

using namespace std::string_literals;

// FNV-1a 64 written out from its definition, independently of key_codec.cc.
uint64_t ReferenceFnv1a64(absl::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;  // Offset basis.
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;  // FNV prime.
  }
  return hash;
}

uint64_t ReferenceKeyHash(absl::string_view ns, absl::string_view key) {
  std::string bytes(ns);
  bytes.push_back('\0');
  bytes.append(key.data(), key.size());
  return ReferenceFnv1a64(bytes);
}

TEST(KeyCodecTest, StorageKeyIsNamespaceThenNulThenKey) {
  EXPECT_EQ(EncodeStorageKey("coupon-deduct", "order-42"), "coupon-deduct\0order-42"s);
}

TEST(KeyCodecTest, RoundTripsKeysHoldingAnyBytes) {
  for (const std::string& key :
       {"order-42"s, ""s, "\0"s, "a\0b"s, "\xff\x80\x01"s, std::string(512, 'k')}) {
    std::string ns;
    std::string decoded;
    ASSERT_TRUE(DecodeStorageKey(EncodeStorageKey("payment-callback", key), &ns, &decoded));
    EXPECT_EQ(ns, "payment-callback");
    EXPECT_EQ(decoded, key);
  }
}

TEST(KeyCodecTest, DecodeRefusesKeyWithoutSeparator) {
  std::string ns = "untouched";
  std::string key = "untouched";
  EXPECT_FALSE(DecodeStorageKey("no-separator-here", &ns, &key));
  EXPECT_FALSE(DecodeStorageKey("", &ns, &key));
}

TEST(KeyCodecTest, NamespacePrefixCoversOnlyThatNamespace) {
  const std::string prefix = NamespacePrefix("a");
  EXPECT_EQ(prefix, "a\0"s);
  EXPECT_TRUE(absl::StartsWith(EncodeStorageKey("a", "x"), prefix));
  EXPECT_TRUE(absl::StartsWith(EncodeStorageKey("a", ""), prefix));
  // A namespace that merely starts with "a" is a different range.
  EXPECT_FALSE(absl::StartsWith(EncodeStorageKey("ab", "x"), prefix));
  EXPECT_FALSE(absl::StartsWith(EncodeStorageKey("", "a"), prefix));
}

TEST(KeyCodecTest, ReferenceHashMatchesPublishedFnv1a64Vectors) {
  // Guards the reference itself against a typo in its constants.
  EXPECT_EQ(ReferenceFnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(ReferenceFnv1a64("a"), 0xaf63dc4c8601ec8cull);
}

TEST(KeyCodecTest, KeyHashIsFnv1a64OverNamespaceNulKey) {
  EXPECT_EQ(KeyHash("", ""), ReferenceKeyHash("", ""));
  EXPECT_EQ(KeyHash("coupon-deduct", "order-42"), ReferenceKeyHash("coupon-deduct", "order-42"));
  EXPECT_EQ(KeyHash("payment-callback", "\0\xff"s),
            ReferenceKeyHash("payment-callback", "\0\xff"s));
}

TEST(KeyCodecTest, KeyHashIsPinnedForClientsInOtherLanguages) {
  // Clients route by this value: it may never change.
  EXPECT_EQ(KeyHash("", ""), 0xaf63bd4c8601b7dfull);
  EXPECT_EQ(KeyHash("a", ""), 0x089be207b544f1e4ull);
  EXPECT_EQ(KeyHash("coupon-deduct", "order-42"), 0xeb33624e8f2cd266ull);
  EXPECT_EQ(KeyHash("payment-callback", "\0\xff"s), 0x1fac7afe08322078ull);
}

TEST(KeyCodecTest, KeyHashSeparatesNamespaceFromKey) {
  EXPECT_NE(KeyHash("ab", "c"), KeyHash("a", "bc"));
  EXPECT_NE(KeyHash("", "abc"), KeyHash("abc", ""));
}

TEST(KeyCodecTest, ShardOfIsKeyHashModuloShardCount) {
  EXPECT_EQ(ShardOf("coupon-deduct", "order-42", 16), 6u);
  EXPECT_EQ(ShardOf("payment-callback", "\0\xff"s, 4096), 120u);
  EXPECT_EQ(ShardOf("", "", 16), 15u);
  EXPECT_EQ(ShardOf("a", "", 16), 4u);
  for (uint32_t count : {1u, 3u, 16u, 4096u}) {
    const std::string key = "key-" + std::to_string(count);
    EXPECT_EQ(ShardOf("ns", key, count),
              static_cast<uint32_t>(ReferenceKeyHash("ns", key) % count));
  }
}

TEST(KeyCodecTest, ShardOfIsStableAndInRange) {
  for (int i = 0; i < 1000; ++i) {
    const std::string key = "order-" + std::to_string(i);
    const uint32_t shard = ShardOf("coupon-deduct", key, 7);
    EXPECT_LT(shard, 7u);
    EXPECT_EQ(ShardOf("coupon-deduct", key, 7), shard);
  }
}

TEST(KeyCodecTest, ShardNameIsZeroPaddedToFourDigits) {
  EXPECT_EQ(ShardName(0), "shard-0000");
  EXPECT_EQ(ShardName(7), "shard-0007");
  EXPECT_EQ(ShardName(42), "shard-0042");
  EXPECT_EQ(ShardName(4095), "shard-4095");
}

}  // namespace
}  // namespace dedup::storage
