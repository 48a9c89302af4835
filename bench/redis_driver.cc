#include "redis_driver.h"

#include <hiredis/hiredis.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dedup::bench {
namespace {

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval ToTimeval(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

absl::StatusOr<ContextPtr> Connect(const RedisDriverOptions& options) {
  ContextPtr context(
      redisConnectWithTimeout(options.host.c_str(), options.port, ToTimeval(options.timeout_ms)));
  if (context == nullptr) return absl::ResourceExhaustedError("redis: out of memory");
  if (context->err != 0) {
    return absl::UnavailableError(
        absl::StrCat("redis at ", options.host, ":", options.port, ": ", context->errstr));
  }
  redisSetTimeout(context.get(), ToTimeval(options.timeout_ms));
  return context;
}

class RedisSession final : public Session {
 public:
  RedisSession(ContextPtr context, const Workload& workload, int caller)
      : context_(std::move(context)),
        owner_(absl::StrCat("bench-", caller)),
        ttl_(std::to_string((workload.lease_ms + 999) / 1000)) {}

  absl::Status ClaimBatch(const std::vector<std::string>& keys, ClaimTally* tally) override {
    for (const auto& key : keys) {
      redisAppendCommand(context_.get(), "SET %b %b NX EX %s", key.data(), key.size(),
                         owner_.data(), owner_.size(), ttl_.c_str());
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(context_.get(), &raw) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat("redis: ", context_->errstr));
      }
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type == REDIS_REPLY_STATUS) {
        ++tally->acquired;  // "OK": the key was set.
      } else if (reply->type == REDIS_REPLY_NIL) {
        ++tally->duplicate;  // NX: it existed.
      } else {
        ++tally->errors;
      }
    }
    return absl::OkStatus();
  }

 private:
  const ContextPtr context_;
  const std::string owner_;
  const std::string ttl_;
};

class RedisDriver final : public Driver {
 public:
  RedisDriver(const RedisDriverOptions& options, const Workload& workload)
      : options_(options), workload_(workload) {}

  std::string Describe() const override {
    return absl::StrCat("redis at ", options_.host, ":", options_.port,
                        " (SET NX EX, pipeline per request)");
  }

  absl::Status Prepare() override {
    if (workload_.complete) {
      return absl::InvalidArgumentError("--complete is implemented for dedupd only");
    }
    absl::StatusOr<ContextPtr> context = Connect(options_);
    if (!context.ok()) return context.status();
    ReplyPtr reply(static_cast<redisReply*>(redisCommand(context->get(), "PING")));
    if (reply == nullptr)
      return absl::UnavailableError(absl::StrCat("redis: ", (*context)->errstr));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Session>> NewSession(int caller) override {
    absl::StatusOr<ContextPtr> context = Connect(options_);
    if (!context.ok()) return context.status();
    return std::make_unique<RedisSession>(*std::move(context), workload_, caller);
  }

 private:
  const RedisDriverOptions options_;
  const Workload workload_;
};

}  // namespace

std::unique_ptr<Driver> MakeRedisDriver(const RedisDriverOptions& options,
                                        const Workload& workload) {
  return std::make_unique<RedisDriver>(options, workload);
}

}  // namespace dedup::bench
