#include "server/logging.h"

#include <atomic>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "storage/key_codec.h"

namespace dedup::server {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};
std::atomic<bool> g_log_keys{false};

constexpr char kTextPattern[] = "%Y-%m-%dT%H:%M:%S.%e%z %l dedupd: %v";

// A text value is quoted when it would not read as one word.
std::string TextValue(const LogField& field) {
  if (field.is_number()) return field.text();
  const std::string& text = field.text();
  bool plain = !text.empty();
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '"' || c == '=') plain = false;
  }
  return plain ? text : absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

std::string TextLine(absl::string_view message, const std::vector<LogField>& fields) {
  std::string line(message);
  for (const LogField& field : fields) {
    absl::StrAppend(&line, " ", field.name(), "=", TextValue(field));
  }
  return line;
}

std::string JsonLine(spdlog::level::level_enum level, absl::string_view message,
                     const std::vector<LogField>& fields) {
  nlohmann::ordered_json line;
  line["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  const spdlog::string_view_t name = spdlog::level::to_string_view(level);
  line["level"] = std::string(name.data(), name.size());
  line["message"] = std::string(message);
  for (const LogField& field : fields) {
    if (field.is_number()) {
      line[field.name()] = nlohmann::ordered_json::parse(field.text());
    } else {
      line[field.name()] = field.text();
    }
  }
  // Values may hold bytes that are not UTF-8: replace them, never throw.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format: must be text or json, got '", name, "'"));
}

void ConfigureLogging(const LogOptions& options) {
  g_format = options.format;
  g_log_keys = options.log_keys;
  // A JSON line is complete as LogEvent writes it; text gets time and level
  // from spdlog.
  spdlog::set_pattern(options.format == LogFormat::kJson ? "%v" : kTextPattern);
}

LogField::LogField(std::string name, absl::string_view text)
    : name_(std::move(name)), text_(text), is_number_(false) {}
LogField::LogField(std::string name, const char* text)
    : LogField(std::move(name), absl::string_view(text)) {}
LogField::LogField(std::string name, const std::string& text)
    : LogField(std::move(name), absl::string_view(text)) {}
LogField::LogField(std::string name, int64_t number)
    : name_(std::move(name)), text_(absl::StrCat(number)), is_number_(true) {}
LogField::LogField(std::string name, uint64_t number)
    : name_(std::move(name)), text_(absl::StrCat(number)), is_number_(true) {}
LogField::LogField(std::string name, int number) : LogField(std::move(name), int64_t{number}) {}
LogField::LogField(std::string name, uint32_t number)
    : LogField(std::move(name), uint64_t{number}) {}

std::vector<LogField> KeyFields(absl::string_view ns, absl::string_view key) {
  std::vector<LogField> fields;
  fields.emplace_back("namespace", ns);
  fields.emplace_back("key_hash", absl::StrFormat("%016x", storage::KeyHash(ns, key)));
  if (g_log_keys) {
    constexpr size_t kMaxKeyBytes = 64;
    std::string escaped = absl::CHexEscape(key.substr(0, kMaxKeyBytes));
    if (key.size() > kMaxKeyBytes) escaped += "...";
    fields.emplace_back("key", escaped);
  }
  return fields;
}

void LogEvent(spdlog::level::level_enum level, absl::string_view message,
              std::initializer_list<LogField> fields) {
  LogEvent(level, message, std::vector<LogField>(fields));
}

void LogEvent(spdlog::level::level_enum level, absl::string_view message,
              const std::vector<LogField>& fields) {
  if (!spdlog::should_log(level)) return;
  const std::string line =
      g_format == LogFormat::kJson ? JsonLine(level, message, fields) : TextLine(message, fields);
  spdlog::log(level, "{}", line);
}

}  // namespace dedup::server
