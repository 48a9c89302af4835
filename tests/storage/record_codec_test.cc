#include "storage/record_codec.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "storage/record.h"
#include "tests/storage/printers.h"

namespace dedup::storage {
namespace {

using namespace std::string_literals;

// Every field set, every byte string holding bytes that text handling would
// mangle: NUL, 0xff, high bit set.
Record FullRecord() {
  Record r;
  r.state = State::kCompleted;
  r.owner = "worker-7\0\xff"s;
  r.token = 0x0102030405060708ull;
  r.fingerprint = "\x00\x01\x80\xfe\xff"s;
  r.lease_expires_ms = 1'700'000'030'000;
  r.retention_expires_ms = 1'700'086'400'000;
  r.attempts = 3;
  r.created_ms = 1'700'000'000'000;
  r.updated_ms = 1'700'000'010'000;
  r.completed_ms = 1'700'000'010'000;
  r.result = "{\"charged\":true}\0\xff\x80"s;
  return r;
}

Record Decoded(const std::string& value) {
  Record out;
  EXPECT_TRUE(DecodeRecord(value, &out)) << "value of " << value.size() << " bytes";
  return out;
}

TEST(RecordCodecTest, RoundTripsFullRecordWithBinaryBytes) {
  const Record r = FullRecord();
  EXPECT_EQ(Decoded(EncodeRecord(r)), r);
}

TEST(RecordCodecTest, RoundTripsEmptyStrings) {
  Record r = FullRecord();
  r.owner.clear();
  r.fingerprint.clear();
  r.result.clear();
  EXPECT_EQ(Decoded(EncodeRecord(r)), r);
}

TEST(RecordCodecTest, RoundTripsEveryStoredState) {
  for (State state : {State::kInProgress, State::kCompleted, State::kReleased, State::kFailed}) {
    Record r = FullRecord();
    r.state = state;
    EXPECT_EQ(Decoded(EncodeRecord(r)), r) << StateName(state);
  }
}

TEST(RecordCodecTest, RoundTripsExtremeNumbers) {
  Record r = FullRecord();
  r.token = std::numeric_limits<uint64_t>::max();
  r.attempts = std::numeric_limits<uint32_t>::max();
  r.lease_expires_ms = std::numeric_limits<int64_t>::min();
  r.retention_expires_ms = std::numeric_limits<int64_t>::max();
  r.created_ms = -1;
  r.updated_ms = 0;
  r.completed_ms = -1'000;
  EXPECT_EQ(Decoded(EncodeRecord(r)), r);
}

TEST(RecordCodecTest, RoundTripsResultWhoseLengthNeedsAMultiByteVarint) {
  Record r = FullRecord();
  r.result.assign(64 * 1024, '\xab');  // The default result limit.
  r.owner.assign(200, 'o');            // Two varint bytes.
  EXPECT_EQ(Decoded(EncodeRecord(r)), r);
}

TEST(RecordCodecTest, DecodeLeavesNamespaceAndKeyUntouched) {
  Record encoded = FullRecord();
  encoded.ns = "ns-in-the-value?";
  encoded.key = "key-in-the-value?";
  Record out;
  out.ns = "coupon-deduct";
  out.key = "order-42";
  ASSERT_TRUE(DecodeRecord(EncodeRecord(encoded), &out));
  EXPECT_EQ(out.ns, "coupon-deduct");
  EXPECT_EQ(out.key, "order-42");
  EXPECT_EQ(out.token, encoded.token);
}

TEST(RecordCodecTest, EncodesTheDocumentedVersionOneLayout) {
  Record r;
  r.state = State::kInProgress;
  r.token = 0x0102030405060708ull;
  r.lease_expires_ms = 0x11;
  r.retention_expires_ms = -1;
  r.created_ms = 0x22;
  r.updated_ms = 0x33;
  r.completed_ms = 0x44;
  r.attempts = 0x0a0b0c0d;
  r.owner = "ab";
  r.fingerprint = "";
  r.result = std::string(130, 'x');

  std::string expected;
  expected += "\x01"s;                              // version
  expected += "\x01"s;                              // state IN_PROGRESS
  expected += "\x08\x07\x06\x05\x04\x03\x02\x01"s;  // token, little endian
  expected += "\x11\0\0\0\0\0\0\0"s;                // lease_expires_ms
  expected += "\xff\xff\xff\xff\xff\xff\xff\xff"s;  // retention_expires_ms
  expected += "\x22\0\0\0\0\0\0\0"s;                // created_ms
  expected += "\x33\0\0\0\0\0\0\0"s;                // updated_ms
  expected += "\x44\0\0\0\0\0\0\0"s;                // completed_ms
  expected += "\x0d\x0c\x0b\x0a"s;                  // attempts
  expected += "\x02"s + "ab";                       // owner
  expected += "\x00"s;                              // fingerprint
  expected += "\x82\x01"s + std::string(130, 'x');  // result, varint 130
  EXPECT_EQ(EncodeRecord(r), expected);
}

TEST(RecordCodecTest, WritesAHolderAsVersionTwoWithTheHolderAppended) {
  Record r = FullRecord();
  const std::string version_one = EncodeRecord(r);
  r.holder = "spiffe://payments/worker\0"s;

  const std::string value = EncodeRecord(r);
  ASSERT_EQ(value.size(), version_one.size() + 1 + r.holder.size());
  EXPECT_EQ(value[0], '\x02');
  EXPECT_EQ(value.substr(1, version_one.size() - 1), version_one.substr(1));
  EXPECT_EQ(value.substr(version_one.size()), "\x19"s + r.holder);
  EXPECT_EQ(Decoded(value), r);
}

TEST(RecordCodecTest, DecodingAVersionOneRecordClearsAStaleHolder) {
  Record out;
  out.holder = "left over";
  ASSERT_TRUE(DecodeRecord(EncodeRecord(FullRecord()), &out));
  EXPECT_EQ(out.holder, "");
}

TEST(RecordCodecTest, RejectsVersionTwoWithoutAHolder) {
  std::string value = EncodeRecord(FullRecord());
  value[0] = '\x02';
  Record out;
  EXPECT_FALSE(DecodeRecord(value, &out)) << "version 2 with nothing after the result";
  EXPECT_FALSE(DecodeRecord(value + '\0', &out)) << "version 2 with an empty holder";
}

TEST(RecordCodecTest, RejectsEveryTruncationOfVersionTwo) {
  Record r = FullRecord();
  r.holder = "worker-identity";
  const std::string value = EncodeRecord(r);
  for (size_t size = 0; size < value.size(); ++size) {
    Record out;
    EXPECT_FALSE(DecodeRecord(value.substr(0, size), &out))
        << "accepted the first " << size << " of " << value.size() << " bytes";
  }
}

TEST(RecordCodecTest, RejectsEveryTruncation) {
  const std::string value = EncodeRecord(FullRecord());
  for (size_t size = 0; size < value.size(); ++size) {
    Record out;
    EXPECT_FALSE(DecodeRecord(value.substr(0, size), &out))
        << "accepted the first " << size << " of " << value.size() << " bytes";
  }
}

TEST(RecordCodecTest, RejectsTrailingBytes) {
  const std::string value = EncodeRecord(FullRecord());
  Record out;
  EXPECT_FALSE(DecodeRecord(value + '\0', &out));
  EXPECT_FALSE(DecodeRecord(value + "junk", &out));
}

TEST(RecordCodecTest, RejectsUnknownVersion) {
  for (char version : {'\x00', '\x03', '\xff'}) {
    std::string value = EncodeRecord(FullRecord());
    value[0] = version;
    Record out;
    EXPECT_FALSE(DecodeRecord(value, &out))
        << "version " << static_cast<int>(static_cast<uint8_t>(version));
  }
}

TEST(RecordCodecTest, RejectsUnknownState) {
  // ABSENT (0) is what a read reports, never what is stored.
  for (char state : {'\x00', '\x05', '\xff'}) {
    std::string value = EncodeRecord(FullRecord());
    value[1] = state;
    Record out;
    EXPECT_FALSE(DecodeRecord(value, &out))
        << "state " << static_cast<int>(static_cast<uint8_t>(state));
  }
}

TEST(RecordCodecTest, RejectsLengthRunningPastTheValue) {
  Record r = FullRecord();
  r.owner.clear();
  r.fingerprint.clear();
  r.result.clear();
  std::string value = EncodeRecord(r);
  value.back() = '\x05';  // The result claims 5 bytes; none follow.
  Record out;
  EXPECT_FALSE(DecodeRecord(value, &out));
}

}  // namespace
}  // namespace dedup::storage
