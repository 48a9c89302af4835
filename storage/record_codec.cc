#include "storage/record_codec.h"

#include <cstdint>

namespace dedup::storage {
namespace {

constexpr uint8_t kVersion1 = 1;
constexpr uint8_t kVersion2 = 2;  // Version 1 and a holder.

void PutFixed(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

void PutBytes(std::string* out, absl::string_view bytes) {
  uint64_t n = bytes.size();
  while (n >= 0x80) {
    out->push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out->push_back(static_cast<char>(n));
  out->append(bytes.data(), bytes.size());
}

// Reads from the front of `in_`, failing sticky on the first short read.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}

  uint64_t Fixed(int bytes) {
    if (!ok_ || in_.size() < static_cast<size_t>(bytes)) return Fail();
    uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) {
      value |= static_cast<uint64_t>(static_cast<uint8_t>(in_[i])) << (8 * i);
    }
    in_.remove_prefix(bytes);
    return value;
  }

  std::string Bytes() {
    uint64_t n = 0;
    for (int shift = 0; ok_; shift += 7) {
      if (in_.empty() || shift > 28) return Fail(), std::string();
      const uint8_t byte = static_cast<uint8_t>(in_[0]);
      in_.remove_prefix(1);
      n |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
    }
    if (!ok_ || in_.size() < n) return Fail(), std::string();
    std::string out(in_.substr(0, n));
    in_.remove_prefix(n);
    return out;
  }

  bool Done() const { return ok_ && in_.empty(); }

 private:
  uint64_t Fail() {
    ok_ = false;
    return 0;
  }

  absl::string_view in_;
  bool ok_ = true;
};

}  // namespace

std::string EncodeRecord(const Record& r) {
  std::string out;
  out.reserve(64 + r.owner.size() + r.fingerprint.size() + r.result.size() + r.holder.size());
  PutFixed(&out, r.holder.empty() ? kVersion1 : kVersion2, 1);
  PutFixed(&out, static_cast<uint8_t>(r.state), 1);
  PutFixed(&out, r.token, 8);
  PutFixed(&out, static_cast<uint64_t>(r.lease_expires_ms), 8);
  PutFixed(&out, static_cast<uint64_t>(r.retention_expires_ms), 8);
  PutFixed(&out, static_cast<uint64_t>(r.created_ms), 8);
  PutFixed(&out, static_cast<uint64_t>(r.updated_ms), 8);
  PutFixed(&out, static_cast<uint64_t>(r.completed_ms), 8);
  PutFixed(&out, r.attempts, 4);
  PutBytes(&out, r.owner);
  PutBytes(&out, r.fingerprint);
  PutBytes(&out, r.result);
  if (!r.holder.empty()) PutBytes(&out, r.holder);
  return out;
}

bool DecodeRecord(absl::string_view value, Record* r) {
  Reader in(value);
  const uint64_t version = in.Fixed(1);
  if (version != kVersion1 && version != kVersion2) return false;
  const uint64_t state = in.Fixed(1);
  if (state < static_cast<uint8_t>(State::kInProgress) ||
      state > static_cast<uint8_t>(State::kFailed)) {
    return false;
  }
  r->state = static_cast<State>(state);
  r->token = in.Fixed(8);
  r->lease_expires_ms = static_cast<int64_t>(in.Fixed(8));
  r->retention_expires_ms = static_cast<int64_t>(in.Fixed(8));
  r->created_ms = static_cast<int64_t>(in.Fixed(8));
  r->updated_ms = static_cast<int64_t>(in.Fixed(8));
  r->completed_ms = static_cast<int64_t>(in.Fixed(8));
  r->attempts = static_cast<uint32_t>(in.Fixed(4));
  r->owner = in.Bytes();
  r->fingerprint = in.Bytes();
  r->result = in.Bytes();
  r->holder.clear();
  if (version == kVersion2) {
    r->holder = in.Bytes();
    if (r->holder.empty()) return false;  // Version 2 is only written with a holder.
  }
  return in.Done();
}

}  // namespace dedup::storage
