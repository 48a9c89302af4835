// The client's timer thread on a clock the test moves.
#include "client/src/scheduler.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/client/fake_clock.h"

namespace dedup::client {
namespace {

using test::FakeClock;

// Long enough for a thread that is free to run to have run: a guard against
// hanging, never a wait the test relies on.
constexpr absl::Duration kHang = absl::Seconds(10);

TEST(SchedulerTest, TaskRunsOnlyOnceTheClockReachesItsTime) {
  FakeClock clock;
  Scheduler scheduler(&clock);
  std::atomic<bool> ran{false};
  absl::Notification done, earlier_done;
  scheduler.After(absl::Milliseconds(10), [&] {
    ran = true;
    done.Notify();
  });
  scheduler.After(absl::Milliseconds(9), [&] { earlier_done.Notify(); });

  clock.Advance(absl::Milliseconds(9));
  ASSERT_TRUE(earlier_done.WaitForNotificationWithTimeout(kHang));
  // Tasks run in order of time: had the later one been due, it would
  // have run by now.
  EXPECT_FALSE(ran.load()) << "ran 1 ms early";

  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(kHang));
}

TEST(SchedulerTest, TasksDueTogetherRunInTheOrderGiven) {
  FakeClock clock;
  Scheduler scheduler(&clock);
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification last;
  for (int i = 0; i < 5; ++i) {
    scheduler.After(absl::Milliseconds(5), [&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
    });
  }
  scheduler.After(absl::Milliseconds(5), [&] { last.Notify(); });
  clock.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(kHang));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(SchedulerTest, TaskAddedDuringALongWaitRunsAtItsOwnTime) {
  FakeClock clock;
  Scheduler scheduler(&clock);
  absl::Notification late, early;
  scheduler.After(absl::Hours(1), [&] { late.Notify(); });
  // The thread now sleeps until the 1 h task; the new task must wake it.
  scheduler.After(absl::Milliseconds(1), [&] { early.Notify(); });
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(early.WaitForNotificationWithTimeout(kHang));
  EXPECT_FALSE(late.HasBeenNotified());
}

TEST(SchedulerTest, CancelledTaskNeverRuns) {
  FakeClock clock;
  Scheduler scheduler(&clock);
  std::atomic<bool> ran{false};
  absl::Notification after;
  const Scheduler::TaskId id = scheduler.After(absl::Milliseconds(5), [&] { ran = true; });
  scheduler.After(absl::Milliseconds(5), [&] { after.Notify(); });
  scheduler.Cancel(id);
  clock.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(after.WaitForNotificationWithTimeout(kHang));
  EXPECT_FALSE(ran.load()) << "it was due first, so it would have run before";
}

TEST(SchedulerTest, DestructionDropsTasksNotYetDue) {
  FakeClock clock;
  std::atomic<bool> ran{false};
  {
    Scheduler scheduler(&clock);
    scheduler.After(absl::Seconds(1), [&] { ran = true; });
  }
  clock.Advance(absl::Seconds(2));
  EXPECT_FALSE(ran.load());
}

// The wall clock is for dates only: setting it moves no timer.
TEST(SchedulerTest, SettingTheWallClockMovesNoTask) {
  FakeClock clock;
  Scheduler scheduler(&clock);
  std::atomic<bool> ran{false};
  absl::Notification marker;
  scheduler.After(absl::Milliseconds(10), [&] { ran = true; });
  clock.StepWallClock(absl::Hours(1));
  scheduler.After(absl::ZeroDuration(), [&] { marker.Notify(); });
  ASSERT_TRUE(marker.WaitForNotificationWithTimeout(kHang));
  EXPECT_FALSE(ran.load());
}

}  // namespace
}  // namespace dedup::client
