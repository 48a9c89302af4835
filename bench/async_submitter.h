#ifndef DEDUP_BENCH_ASYNC_SUBMITTER_H_
#define DEDUP_BENCH_ASYNC_SUBMITTER_H_

#include "driver.h"
#include "key_source.h"
#include "run_state.h"
#include "workload.h"

namespace dedup::bench {

// Submitting thread number `index` of `threads` in the asynchronous mode:
// keeps one claim in flight on each of the slots [first_slot, first_slot +
// slots) of `session`, paced as the blocking callers are (under a rate the
// threads share it, and latency counts from when a claim was due), until
// the run's time or claim budget is spent. Then it waits for every claim it
// sent to answer (each bounded by its calls' deadlines) and leaves its
// share of the result in *out; no callback touches *out or *shared after
// it returns. Counts exactly as the blocking callers do (CountAnswer): a
// claim's latency runs from its submission (or due time) to the callback
// of its last call. A slot whose claim failed rests kErrorPause before its
// next claim.
void RunSubmitter(int index, int threads, int first_slot, int slots, AsyncSession* session,
                  const Workload& workload, KeySource* keys, Shared* shared, CallerResult* out);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_ASYNC_SUBMITTER_H_
