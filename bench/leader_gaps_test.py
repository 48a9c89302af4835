#!/usr/bin/env python3
"""Checks bench/leader_gaps.py on made-up node logs: a change of leader is
a step-down followed by another node leading the shard, timed from one to
the other and grouped by the reason given; a step-down that no later
leader follows counts nothing. Standard library only.

  python3 bench/leader_gaps_test.py
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import leader_gaps  # noqa: E402

NODE_0 = """\
2026-12-07T10:00:00.000+00:00 info dedupd: leading shard shard=1 epoch=1
2026-12-07T10:00:00.000+00:00 info dedupd: leading shard shard=2 epoch=1
2026-12-07T10:00:01.000+00:00 warning dedupd: no longer leading shard shard=1 epoch=1 reason="its first replica is back: handed to node 1"
2026-12-07T10:00:02.000+00:00 warning dedupd: no longer leading shard shard=2 epoch=1 reason="stopping: handed to node 2"
2026-12-07T10:00:03.000+00:00 warning dedupd: no longer leading shard shard=3 epoch=4 reason="node 1 promised epoch 5"
2026-12-07T10:00:04.000+00:00 info dedupd: serving dedup.v1.Dedup listen=127.0.0.1:7410
"""
NODE_1 = """\
2026-12-07T10:00:01.250+00:00 info dedupd: leading shard shard=1 epoch=2
2026-12-07T10:00:03.900+00:00 info dedupd: leading shard shard=3 epoch=5
"""
NODE_2 = """\
2026-12-07T10:00:02.400+00:00 info dedupd: leading shard shard=2 epoch=2
2026-12-07T10:00:05.000+00:00 warning dedupd: no longer leading shard shard=2 epoch=2 reason="stopping"
"""


class LeaderGapsTest(unittest.TestCase):
    def setUp(self):
        self.found = leader_gaps.gaps(
            event for log in (NODE_0, NODE_1, NODE_2)
            for event in leader_gaps.events(log.splitlines()))

    def gaps_of(self, reason):
        return [round(g) for g in self.found.get(reason, [])]

    def test_changes_are_grouped_by_the_reason_given(self):
        self.assertEqual(sorted(self.found),
                         ["hand-back to the first replica", "node stopping", "other"])

    def test_a_change_is_timed_from_step_down_to_the_next_leader(self):
        self.assertEqual(self.gaps_of("hand-back to the first replica"), [250])
        self.assertEqual(self.gaps_of("other"), [900])

    def test_a_step_down_without_a_later_leader_counts_nothing(self):
        # Shard 2's second step-down is the last line about it.
        self.assertEqual(self.gaps_of("node stopping"), [400])

    def test_summary(self):
        s = leader_gaps.summary([100, 200, 300, 400])
        self.assertEqual((s["count"], s["p50_ms"], s["p99_ms"], s["max_ms"]), (4, 300, 400, 400))


if __name__ == "__main__":
    unittest.main()
