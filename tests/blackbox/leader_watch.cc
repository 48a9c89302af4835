#include "tests/blackbox/leader_watch.h"

#include "dedup/client/clock.h"

namespace dedup::blackbox {

LeaderWatch::LeaderWatch(const ReplicatedCluster* cluster, absl::Duration interval)
    : cluster_(cluster),
      interval_(interval),
      times_(cluster->shards()),
      thread_([this] { Run(); }) {}

LeaderWatch::~LeaderWatch() { Stop(); }

void LeaderWatch::Stop() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
}

void LeaderWatch::Run() {
  const client::Clock& clock = *client::SystemClock::Default();
  do {
    const TopologyAnswers answers = cluster_->AskTopology(absl::Milliseconds(250));
    times_.Observe(clock.SteadyNow(), LeadersOf(answers, cluster_->shards()));
    for (std::string& conflict : LeadershipConflicts(answers, cluster_->shards())) {
      conflicts_.insert(std::move(conflict));
    }
  } while (!stop_.WaitForNotificationWithTimeout(interval_));
}

}  // namespace dedup::blackbox
