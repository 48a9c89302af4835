#ifndef DEDUP_STORAGE_RECORD_CODEC_H_
#define DEDUP_STORAGE_RECORD_CODEC_H_

#include <string>

#include "absl/strings/string_view.h"
#include "storage/record.h"

namespace dedup::storage {

// The value layout of a stored record. Namespace and key live in the storage
// key (see key_codec.h) and are not encoded here.
//
// Version 1, little endian:
//   u8 version | u8 state | u64 token | i64 lease_expires_ms |
//   i64 retention_expires_ms | i64 created_ms | i64 updated_ms |
//   i64 completed_ms | u32 attempts |
//   varint len + owner | varint len + fingerprint | varint len + result
//
// Version 2 is version 1 followed by varint len + holder. A record without
// a holder (a server without authentication) is written as version 1, so
// such data directories stay byte for byte what older servers wrote and
// can still be read by them.
std::string EncodeRecord(const Record& record);

// Parses a value written by EncodeRecord into `record` (leaving ns and key
// untouched). Returns false, and leaves `record` unspecified, when the value
// is truncated, has trailing bytes, an unknown version or an unknown state.
bool DecodeRecord(absl::string_view value, Record* record);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_RECORD_CODEC_H_
