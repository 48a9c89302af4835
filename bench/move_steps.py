#!/usr/bin/env python3
"""How long each step of a shard move took, from the nodes' own logs.

  move_steps.py DIR

DIR holds node-<i>.log files of dedupd in its text log format, as
`BENCH_KEEP=1 bench/grow` keeps them. Each move is followed through the
events its nodes log (docs/elastic.md §3), by shard and in time order:

  requested  MoveShard accepted            "shard move requested"
  learner    the target holds it           "holding a shard as a learner"
  promoted   the target votes              "move target caught up and votes"
  handoff    the source stops leading      "no longer leading" (moves whose
             (only when it led the shard)   source led the shard)
  led        the target leads              "leading shard"
  moved      the source leaves the voters  "shard moved"

Prints, per step, how many moves had it and the median and 90th percentile
of its time since the step before, in ms; then the same for a whole move,
and the time from the first request to the last move's end.
"""
import collections
import datetime
import glob
import os
import re
import statistics
import sys

EVENT = re.compile(r"^(\S+) \S+ dedupd: (.*?) shard=(\d+)")
STEPS = ["learner", "promoted", "handoff", "led", "moved"]


def events(directory):
    by_shard = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(directory, "node-*.log"))):
        with open(path, errors="replace") as f:
            for line in f:
                m = EVENT.match(line)
                if not m:
                    continue
                when = datetime.datetime.fromisoformat(m.group(1)).timestamp()
                by_shard[int(m.group(3))].append((when, m.group(2)))
    return by_shard


def moves(by_shard):
    """Yields each finished move as {step: time}."""
    for shard_events in by_shard.values():
        shard_events.sort()
        move = None
        for when, what in shard_events:
            if what.startswith("shard move requested"):
                move = {"requested": when}
            elif move is None:
                continue
            elif what.startswith("holding a shard as a learner"):
                move.setdefault("learner", when)
            elif what.startswith("move target caught up"):
                move.setdefault("promoted", when)
            elif what.startswith("no longer leading") and "promoted" in move:
                move.setdefault("handoff", when)
            elif what.startswith("leading shard") and "handoff" in move:
                move.setdefault("led", when)
            elif what.startswith("shard moved"):
                move["moved"] = when
                yield move
                move = None


def spread(values):
    values = sorted(values)
    return statistics.median(values) * 1000, values[int(len(values) * 0.9)] * 1000


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    done = list(moves(events(argv[1])))
    if not done:
        print(f"move_steps: no finished move in {argv[1]}/node-*.log", file=sys.stderr)
        return 1
    took = collections.defaultdict(list)
    for move in done:
        before = move["requested"]
        for step in STEPS:
            if step in move:
                took[step].append(move[step] - before)
                before = move[step]
        took["whole move"].append(move["moved"] - move["requested"])
    for step in STEPS + ["whole move"]:
        if took[step]:
            median, p90 = spread(took[step])
            print(f"{step:10} {len(took[step]):6} moves  median {median:7.0f} ms  p90 {p90:7.0f} ms")
    first = min(m["requested"] for m in done)
    last = max(m["moved"] for m in done)
    print(f"{len(done)} moves from the first request to the last end: {last - first:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
