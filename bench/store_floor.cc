// dedup_store_floor: what the store alone costs per claim, with no gRPC.
//
// Opens a Store in a fresh directory with dedupd's built-in storage
// settings (buffered, so the WAL is written but not synced per call, the shard count given, the
// hash memtable unless
// --memtable=skiplist), and has --threads threads apply claims of unique
// random keys in calls of --batch, as DedupService does, until --claims
// are applied. It prints claims/s and the process's CPU per claim (user +
// system, every thread, RocksDB's background threads included), so that a
// dedupd figure can be split into what storage costs and what the rest of
// the server adds (bench/floors). 127.0.0.1 is not involved: nothing here
// listens.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/process_stats.h"
#include "storage/store.h"

ABSL_FLAG(std::string, dir, "",
          "Data directory to create (must not exist); default a new temp dir.");
ABSL_FLAG(int, threads, 2, "Threads applying claims (dedupd's inline execution uses gRPC's 2).");
ABSL_FLAG(int, batch, 64, "Claims per Store::Apply call (1..10000).");
ABSL_FLAG(int64_t, claims, 2000000, "Claims in total (warm-up included).");
ABSL_FLAG(double, warmup_fraction, 0.1, "Fraction of --claims applied before measuring.");
ABSL_FLAG(int, shards, 16, "Shards of the store.");
ABSL_FLAG(std::string, memtable, "hash", "hash (built-in without replication) or skiplist.");
ABSL_FLAG(bool, keep, false, "Keep the data directory afterwards.");

namespace {

using dedup::storage::ClaimOp;
using dedup::storage::Operation;

std::string NewTempDir() {
  std::string pattern = "/tmp/dedup-store-floor-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    perror("dedup_store_floor: mkdtemp");
    exit(1);
  }
  return pattern + "/data";
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "what the store alone costs per claim, no gRPC: claims/s and process CPU per claim.\n"
      "  dedup_store_floor --threads=2 --batch=64 --claims=2000000");
  absl::ParseCommandLine(argc, argv);
  // As dedupd does (server/main.cc): Debian's Abseil has the lock graph on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int64_t claims = absl::GetFlag(FLAGS_claims);
  const double warmup_fraction = absl::GetFlag(FLAGS_warmup_fraction);
  const std::string memtable = absl::GetFlag(FLAGS_memtable);
  if (threads < 1 || threads > 256 || batch < 1 || batch > 10000 || claims < 1 ||
      warmup_fraction < 0 || warmup_fraction >= 1 ||
      (memtable != "hash" && memtable != "skiplist")) {
    fprintf(stderr,
            "dedup_store_floor: --threads 1..256, --batch 1..10000, --claims >= 1, "
            "--warmup_fraction in [0, 1), --memtable hash or skiplist\n");
    return 2;
  }
  if (!absl::GetFlag(FLAGS_dir).empty() && std::filesystem::exists(absl::GetFlag(FLAGS_dir))) {
    fprintf(stderr, "dedup_store_floor: --dir %s exists; give a path to create\n",
            absl::GetFlag(FLAGS_dir).c_str());
    return 2;
  }
  dedup::storage::StoreOptions options;
  options.path = absl::GetFlag(FLAGS_dir).empty() ? NewTempDir() : absl::GetFlag(FLAGS_dir);
  options.new_shards = static_cast<uint32_t>(absl::GetFlag(FLAGS_shards));
  options.hash_memtable = memtable == "hash";
  options.durability = dedup::storage::Durability::kBuffered;
  absl::StatusOr<std::unique_ptr<dedup::storage::Store>> store =
      dedup::storage::Store::Open(options);
  if (!store.ok()) {
    fprintf(stderr, "dedup_store_floor: %s\n", store.status().ToString().c_str());
    return 1;
  }

  const int64_t warmup = static_cast<int64_t>(static_cast<double>(claims) * warmup_fraction);
  std::atomic<int64_t> next{0};    // Claims handed out so far.
  std::atomic<int64_t> failed{0};  // Operations answered with an error.
  double cpu_start = 0;
  std::chrono::steady_clock::time_point wall_start;
  std::atomic<int64_t> measured_from{-1};

  auto work = [&](int index) {
    std::mt19937_64 rng(0x5eed + static_cast<uint64_t>(index));
    std::vector<Operation> ops(static_cast<size_t>(batch));
    while (true) {
      const int64_t first = next.fetch_add(batch);
      if (first >= claims) return;
      for (Operation& op : ops) {
        ClaimOp claim;
        claim.ns = "floor";
        claim.key = absl::StrCat("key-", rng());
        claim.owner = "worker";
        claim.lease_ms = 60000;
        claim.max_attempts = 5;
        claim.failed_retention_ms = 60000;
        op = std::move(claim);
      }
      for (const auto& result : (*store)->Apply(ops)) {
        if (!result.ok()) failed.fetch_add(1);
      }
    }
  };
  // The warm-up runs on the same threads: measuring starts when the claims
  // handed out pass `warmup`, read by the thread that hands them out.
  std::thread starter([&] {
    while (next.load() < warmup) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    cpu_start = dedup::bench::OwnCpuSeconds();
    wall_start = std::chrono::steady_clock::now();
    measured_from = next.load();
  });
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) workers.emplace_back(work, i);
  for (std::thread& worker : workers) worker.join();
  starter.join();
  const double cpu = dedup::bench::OwnCpuSeconds() - cpu_start;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const int64_t measured = claims - measured_from.load();
  if (failed.load() > 0) {
    fprintf(stderr, "dedup_store_floor: %lld operations failed\n",
            static_cast<long long>(failed.load()));
    return 1;
  }
  printf(
      "{\"threads\": %d, \"batch\": %d, \"memtable\": \"%s\", \"claims\": %lld, "
      "\"claims_per_s\": %.0f, \"cpu_us_per_claim\": %.3f}\n",
      threads, batch, memtable.c_str(), static_cast<long long>(measured),
      static_cast<double>(measured) / wall, cpu * 1e6 / static_cast<double>(measured));
  store->reset();
  if (!absl::GetFlag(FLAGS_keep)) {
    // A temp directory goes whole; a --dir given goes, not its parent.
    const std::filesystem::path made(options.path);
    std::error_code ignored;
    std::filesystem::remove_all(absl::GetFlag(FLAGS_dir).empty() ? made.parent_path() : made,
                                ignored);
  }
  return 0;
}
