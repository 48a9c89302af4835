#include "postgres_driver.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dedup::bench {
namespace {

struct ConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// Table names come from the namespace, which allows '.' and '-'.
std::string TableOf(const std::string& ns) {
  std::string table = "claims_";
  for (char c : ns) table += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return table;
}

absl::Status Exec(PGconn* conn, const std::string& sql) {
  ResultPtr result(PQexec(conn, sql.c_str()));
  const ExecStatusType status = PQresultStatus(result.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    return absl::UnavailableError(absl::StrCat("postgres: ", sql, ": ", PQerrorMessage(conn)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ConnPtr> Connect(const PostgresDriverOptions& options) {
  ConnPtr conn(PQconnectdb(options.conninfo.c_str()));
  if (conn == nullptr || PQstatus(conn.get()) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat("postgres (", options.conninfo, "): ", PQerrorMessage(conn.get())));
  }
  if (absl::Status s =
          Exec(conn.get(), absl::StrCat("SET synchronous_commit = ", options.synchronous_commit));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Exec(conn.get(), "SET statement_timeout = 10000"); !s.ok()) return s;
  return conn;
}

class PostgresSession final : public Session {
 public:
  PostgresSession(ConnPtr conn, const Workload& workload, int caller)
      : conn_(std::move(conn)),
        table_(TableOf(workload.ns)),
        owner_(absl::StrCat("bench-", caller)),
        lease_ms_(std::to_string(workload.lease_ms)) {}

  absl::Status ClaimBatch(const std::vector<std::string>& keys, ClaimTally* tally) override {
    if (absl::Status s = PrepareFor(keys.size()); !s.ok()) return s;
    // Rows in key order: concurrent multi-row inserts that overlap then wait
    // on each other in the same order and cannot deadlock.
    std::vector<const std::string*> sorted;
    sorted.reserve(keys.size());
    for (const auto& key : keys) sorted.push_back(&key);
    std::sort(sorted.begin(), sorted.end(),
              [](const std::string* a, const std::string* b) { return *a < *b; });
    std::vector<const char*> values;
    std::vector<int> lengths;
    for (const std::string* key : sorted) {
      values.push_back(key->data());
      lengths.push_back(static_cast<int>(key->size()));
    }
    values.push_back(owner_.c_str());
    lengths.push_back(static_cast<int>(owner_.size()));
    values.push_back(lease_ms_.c_str());
    lengths.push_back(static_cast<int>(lease_ms_.size()));
    std::vector<int> formats(values.size(), 0);
    ResultPtr result(PQexecPrepared(conn_.get(), StatementName(keys.size()).c_str(),
                                    static_cast<int>(values.size()), values.data(), lengths.data(),
                                    formats.data(), 0));
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
      return absl::UnavailableError(absl::StrCat("postgres: ", PQerrorMessage(conn_.get())));
    }
    const uint64_t inserted = std::strtoull(PQcmdTuples(result.get()), nullptr, 10);
    tally->acquired += inserted;
    tally->duplicate += keys.size() - std::min<uint64_t>(inserted, keys.size());
    return absl::OkStatus();
  }

 private:
  static std::string StatementName(size_t rows) { return absl::StrCat("claim_", rows); }

  // INSERT of `rows` rows: keys are $1..$rows, then the owner and the lease.
  absl::Status PrepareFor(size_t rows) {
    if (prepared_rows_ == rows) return absl::OkStatus();
    const size_t owner = rows + 1;
    const size_t lease = rows + 2;
    std::string sql = absl::StrCat("INSERT INTO ", table_, " (k, owner, expires_at) VALUES ");
    for (size_t i = 1; i <= rows; ++i) {
      absl::StrAppend(&sql, i > 1 ? ", " : "", "($", i, ", $", owner, ", now() + $", lease,
                      "::bigint * interval '1 millisecond')");
    }
    absl::StrAppend(&sql, " ON CONFLICT (k) DO NOTHING");
    ResultPtr result(PQprepare(conn_.get(), StatementName(rows).c_str(), sql.c_str(),
                               static_cast<int>(lease), nullptr));
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
      return absl::UnavailableError(
          absl::StrCat("postgres: prepare: ", PQerrorMessage(conn_.get())));
    }
    prepared_rows_ = rows;
    return absl::OkStatus();
  }

  const ConnPtr conn_;
  const std::string table_;
  const std::string owner_;
  const std::string lease_ms_;
  size_t prepared_rows_ = 0;
};

class PostgresDriver final : public Driver {
 public:
  PostgresDriver(const PostgresDriverOptions& options, const Workload& workload)
      : options_(options), workload_(workload) {}

  std::string Describe() const override {
    return absl::StrCat("postgres (", options_.conninfo,
                        ", synchronous_commit=", options_.synchronous_commit,
                        ", INSERT ON CONFLICT DO NOTHING)");
  }

  absl::Status Prepare() override {
    if (workload_.complete) {
      return absl::InvalidArgumentError("--complete is implemented for dedupd only");
    }
    if (options_.synchronous_commit != "on" && options_.synchronous_commit != "off") {
      return absl::InvalidArgumentError("--pg_synchronous_commit must be on or off");
    }
    absl::StatusOr<ConnPtr> conn = Connect(options_);
    if (!conn.ok()) return conn.status();
    return Exec(conn->get(), absl::StrCat("CREATE TABLE IF NOT EXISTS ", TableOf(workload_.ns),
                                          " (k text PRIMARY KEY, owner text NOT NULL,"
                                          " expires_at timestamptz NOT NULL)"));
  }

  absl::StatusOr<std::unique_ptr<Session>> NewSession(int caller) override {
    absl::StatusOr<ConnPtr> conn = Connect(options_);
    if (!conn.ok()) return conn.status();
    return std::make_unique<PostgresSession>(*std::move(conn), workload_, caller);
  }

 private:
  const PostgresDriverOptions options_;
  const Workload workload_;
};

}  // namespace

std::unique_ptr<Driver> MakePostgresDriver(const PostgresDriverOptions& options,
                                           const Workload& workload) {
  return std::make_unique<PostgresDriver>(options, workload);
}

}  // namespace dedup::bench
