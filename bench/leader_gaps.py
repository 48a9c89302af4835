#!/usr/bin/env python3
"""bench/leader_gaps.py: how long each shard went without a leader when
leadership changed hands, from the nodes' logs.

For every shard, each "no longer leading shard" line followed (in time,
over all the logs given) by a "leading shard" line of the same shard is
one change of leader; the time between them is the shard's gap. Printed
per reason the old leader gave (a hand-back to the first replica, a node
stopping, or anything else, such as a competing election), with the
gap's median, 90th and 99th percentiles and maximum.

The gap is a lower bound on what callers see: a leader that hands a shard
over stops serving it first and steps down only once the target has
caught up, and a client learns of the new leader only after it.

  python3 bench/leader_gaps.py NODE_LOG... [--json]

For a new cluster's settling after its start:

  DEDUPD_BINARY=build/server/dedupd deploy/local-cluster.sh start -n 3 -r 3 -d DIR
  bench/await-settled build/client/dedupctl 127.0.0.1:7410
  deploy/local-cluster.sh stop -d DIR      # the stop's hand-offs count too
  python3 bench/leader_gaps.py DIR/node-*.log

Standard library only.
"""
import argparse
import datetime
import json
import re
import sys

LINE = re.compile(r"(\S+) \S+ dedupd: (leading shard|no longer leading shard) shard=(\d+) "
                  r"epoch=(\d+)(.*)")


def reason_of(rest):
    if "first replica is back" in rest:
        return "hand-back to the first replica"
    if "stopping" in rest:
        return "node stopping"
    return "other"


def events(lines):
    """(time in s, shard, kind, reason) for each leadership line."""
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        t = datetime.datetime.fromisoformat(m.group(1)).timestamp()
        leading = m.group(2) == "leading shard"
        yield t, int(m.group(3)), leading, "" if leading else reason_of(m.group(5))


def gaps(all_events):
    """{reason: [gap in ms, ...]} over every change of leader."""
    by_shard = {}
    for t, shard, leading, reason in all_events:
        by_shard.setdefault(shard, []).append((t, leading, reason))
    out = {}
    for shard_events in by_shard.values():
        shard_events.sort()
        for (t0, lead0, reason), (t1, lead1, _) in zip(shard_events, shard_events[1:]):
            if not lead0 and lead1:
                out.setdefault(reason, []).append((t1 - t0) * 1000)
    return out


def summary(values):
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(len(values) * q))]
    return {"count": len(values), "p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99),
            "max_ms": values[-1]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", help="the nodes' log files")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = parser.parse_args()
    collected = []
    for path in args.logs:
        with open(path) as f:
            collected.extend(events(f))
    found = {reason: summary(v) for reason, v in sorted(gaps(collected).items())}
    if not found:
        print("bench/leader_gaps.py: no change of leader in these logs", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found))
        return 0
    print("shards without a leader when leadership changed hands (from the old leader's "
          "step-down to the new leader's first line)")
    for reason, s in found.items():
        print(f"  {reason}: {s['count']} changes; p50 {s['p50_ms']:.0f} ms, "
              f"p90 {s['p90_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms, max {s['max_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
