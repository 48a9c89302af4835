#!/usr/bin/env python3
"""Checks bench/leader_gaps.py on made-up node logs: a change of leader is
a step-down followed by another node leading the shard, timed from one to
the other and grouped by the reason given; a shard led again by nobody
counts nothing. Standard library only.

  python3 bench/leader_gaps_test.py
"""
import os
import sys

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


def main():
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    found = leader_gaps.gaps(
        event for log in (NODE_0, NODE_1, NODE_2)
        for event in leader_gaps.events(log.splitlines()))
    check(sorted(found) == ["hand-back to the first replica", "node stopping", "other"],
          f"reasons: {sorted(found)}")
    check([round(g) for g in found.get("hand-back to the first replica", [])] == [250],
          f"hand-back gap: {found.get('hand-back to the first replica')}")
    # Shard 2's second step-down has no later leader: only the first counts.
    check([round(g) for g in found.get("node stopping", [])] == [400],
          f"stopping gaps: {found.get('node stopping')}")
    check([round(g) for g in found.get("other", [])] == [900], f"other: {found.get('other')}")
    s = leader_gaps.summary([100, 200, 300, 400])
    check(s["count"] == 4 and s["p50_ms"] == 300 and s["max_ms"] == 400, f"summary: {s}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("leader_gaps: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
