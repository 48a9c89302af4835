#ifndef DEDUP_SERVER_LOGGING_H_
#define DEDUP_SERVER_LOGGING_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spdlog/common.h"

namespace dedup::server {

// How dedupd writes its log (to stderr, one event per line).
enum class LogFormat {
  // "2026-12-01T04:00:00.123+0000 info dedupd: lease takeover namespace=a key_hash=..."
  kText,
  // {"time":"2026-12-01T04:00:00.123Z","level":"info","message":"lease takeover",
  //  "namespace":"a","key_hash":"..."}: one JSON object per line, for log
  // pipelines.
  kJson,
};

// "text" or "json"; INVALID_ARGUMENT naming --log_format otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

struct LogOptions {
  LogFormat format = LogFormat::kText;
  // Keys can carry customer ids, so by default a log line names a key only
  // by its hash (key_hash); with log_keys it also carries the key itself,
  // escaped.
  bool log_keys = false;
};

// Sets the format of every later line. Call once at start-up, before other
// threads log; tests may call it again.
void ConfigureLogging(const LogOptions& options);

// One named value of a log event. Numbers stay numbers in JSON.
class LogField {
 public:
  LogField(std::string name, absl::string_view text);
  LogField(std::string name, const char* text);
  LogField(std::string name, const std::string& text);
  LogField(std::string name, int64_t number);
  LogField(std::string name, uint64_t number);
  LogField(std::string name, int number);
  LogField(std::string name, uint32_t number);

  const std::string& name() const { return name_; }
  const std::string& text() const { return text_; }
  bool is_number() const { return is_number_; }

 private:
  std::string name_;
  std::string text_;  // The number in decimal when is_number_.
  bool is_number_;
};

// The fields that name a key of a namespace in a log line: namespace and
// key_hash (the hex of storage::KeyHash, which clients can compute too),
// and the escaped key itself only when LogOptions::log_keys is set.
std::vector<LogField> KeyFields(absl::string_view ns, absl::string_view key);

// Writes one event: a message that reads on its own ("lease takeover") and
// its fields. Thread-safe.
void LogEvent(spdlog::level::level_enum level, absl::string_view message,
              std::initializer_list<LogField> fields = {});
void LogEvent(spdlog::level::level_enum level, absl::string_view message,
              const std::vector<LogField>& fields);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_LOGGING_H_
