// Fuzzes the stored record format (storage/record_codec.h) from both sides.
//
// Bytes as a stored value: DecodeRecord must not read out of bounds, and a
// value it accepts must survive a round trip, decode(encode(r)) == r.
// Re-encoding need not give back the same bytes: a varint length may be
// written with redundant continuation bytes, which EncodeRecord never
// writes and DecodeRecord accepts.
//
// Bytes as the fields of a record: every record of a stored state
// round-trips, and every strict prefix of its encoding, or the encoding
// with a byte appended, is refused (a torn or padded value is never taken
// for a record).

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "storage/record.h"
#include "storage/record_codec.h"

namespace {

using dedup::storage::DecodeRecord;
using dedup::storage::EncodeRecord;
using dedup::storage::Record;
using dedup::storage::State;

void Check(bool condition) {
  if (!condition) std::abort();
}

// Version, state, token, five times, attempts (record_codec.h).
constexpr size_t kHeaderBytes = 1 + 1 + 8 + 5 * 8 + 4;

size_t VarintLength(uint64_t n) {
  size_t length = 1;
  for (; n >= 0x80; n >>= 7) ++length;
  return length;
}

void CheckRoundTrip(const Record& record) {
  const std::string encoded = EncodeRecord(record);
  Record decoded;
  Check(DecodeRecord(encoded, &decoded));
  Check(decoded == record);
}

void FuzzStoredValue(const std::string& value) {
  Record record;
  if (!DecodeRecord(value, &record)) return;
  Check(record.state != State::kAbsent);
  Check(record.ns.empty() && record.key.empty());
  CheckRoundTrip(record);
}

void FuzzRecordFields(FuzzedDataProvider& in) {
  Record record;
  record.state = static_cast<State>(in.ConsumeIntegralInRange<uint8_t>(1, 4));
  record.token = in.ConsumeIntegral<uint64_t>();
  record.lease_expires_ms = in.ConsumeIntegral<int64_t>();
  record.retention_expires_ms = in.ConsumeIntegral<int64_t>();
  record.attempts = in.ConsumeIntegral<uint32_t>();
  record.created_ms = in.ConsumeIntegral<int64_t>();
  record.updated_ms = in.ConsumeIntegral<int64_t>();
  record.completed_ms = in.ConsumeIntegral<int64_t>();
  record.owner = in.ConsumeRandomLengthString(300);
  record.fingerprint = in.ConsumeRandomLengthString(300);
  record.result = in.ConsumeRemainingBytesAsString();
  CheckRoundTrip(record);

  // Torn values: cut inside the fixed header, and at, just before and just
  // after the end of each length-prefixed field (all of them would make
  // each input quadratic).
  const std::string encoded = EncodeRecord(record);
  const absl::string_view view = encoded;
  Record ignored;
  std::vector<size_t> cuts = {0, 1, 2, 10, kHeaderBytes - 1, kHeaderBytes, encoded.size() - 1};
  size_t end = kHeaderBytes;
  for (const std::string* field : {&record.owner, &record.fingerprint, &record.result}) {
    end += VarintLength(field->size()) + field->size();
    cuts.insert(cuts.end(), {end - 1, end, end + 1});
  }
  Check(end == encoded.size());
  for (size_t n : cuts) {
    if (n < encoded.size()) Check(!DecodeRecord(view.substr(0, n), &ignored));
  }
  Check(!DecodeRecord(encoded + '\0', &ignored));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the side; the rest is the input.
  const bool as_value = (data[0] & 1) == 0;
  if (as_value) {
    FuzzStoredValue(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  } else {
    FuzzedDataProvider in(data + 1, size - 1);
    FuzzRecordFields(in);
  }
  return 0;
}
