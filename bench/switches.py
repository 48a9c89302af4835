#!/usr/bin/env python3
"""Context switches of a running process, by thread name, from /proc.

Reads every thread's voluntary and involuntary context switches
(/proc/PID/task/TID/status) and CPU time (/proc/PID/task/TID/stat) twice,
SECONDS apart, and prints per thread name (threads of one name summed) the
switches per second and the CPU share of one core. With --per=N it also
prints switches per unit of work, e.g. per claim when N is the claims the
load generator reported for the same interval.

A thread that sleeps and is woken makes one voluntary switch; one that is
preempted makes an involuntary one. Each costs the kernel a schedule and
the thread its caches, so switches per claim show the hand-offs between
threads that a request goes through.

Usage:
  bench/switches.py PID SECONDS [--per=N] [--json]
Example (dedupd under bench load, in another shell):
  bench/switches.py "$(pgrep -f 'dedupd --listen=127.0.0.1:7480')" 3
"""

import argparse
import collections
import json
import os
import sys
import time


def read_threads(pid):
    """{name: [voluntary, involuntary, cpu_ticks]} summed over threads."""
    totals = collections.defaultdict(lambda: [0, 0, 0])
    task_dir = f"/proc/{pid}/task"
    for tid in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"{task_dir}/{tid}/status") as f:
                status = f.read()
            with open(f"{task_dir}/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # The thread ended meanwhile.
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        # utime and stime are fields 14 and 15; the name (field 2) may hold
        # spaces, so count from the closing parenthesis.
        after_name = stat.rsplit(")", 1)[1].split()
        totals[name][0] += int(fields["voluntary_ctxt_switches"])
        totals[name][1] += int(fields["nonvoluntary_ctxt_switches"])
        totals[name][2] += int(after_name[11]) + int(after_name[12])
    return totals


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Threads that start or end during the interval count only for the part they lived.")
    parser.add_argument("pid", type=int, help="process to watch")
    parser.add_argument("seconds", type=float, help="interval between the two readings")
    parser.add_argument("--per", type=float, default=0,
                        help="units of work done in the interval (e.g. claims): also print per unit")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args()
    if args.seconds <= 0:
        parser.error("SECONDS must be positive")
    if not os.path.isdir(f"/proc/{args.pid}"):
        parser.error(f"no process {args.pid}")
    ticks = os.sysconf("SC_CLK_TCK")
    before = read_threads(args.pid)
    time.sleep(args.seconds)
    after = read_threads(args.pid)

    rows = []
    for name in sorted(after):
        b = before.get(name, [0, 0, 0])
        a = after[name]
        voluntary, involuntary, cpu = (a[i] - b[i] for i in range(3))
        if voluntary == 0 and involuntary == 0 and cpu == 0:
            continue
        row = {
            "thread": name,
            "voluntary_per_s": voluntary / args.seconds,
            "involuntary_per_s": involuntary / args.seconds,
            "cpu_share": cpu / ticks / args.seconds,
        }
        if args.per > 0:
            row["switches_per_unit"] = (voluntary + involuntary) / args.per
        rows.append(row)
    total_switches = sum(r["voluntary_per_s"] + r["involuntary_per_s"] for r in rows)
    summary = {"pid": args.pid, "seconds": args.seconds, "threads": rows,
               "switches_per_s": total_switches}
    if args.per > 0:
        summary["switches_per_unit"] = total_switches * args.seconds / args.per
    if args.json:
        json.dump(summary, sys.stdout)
        print()
        return
    print(f"{'thread':20s} {'voluntary/s':>12s} {'involuntary/s':>14s} {'cpu':>6s}"
          + (f" {'switches/unit':>14s}" if args.per > 0 else ""))
    for r in rows:
        print(f"{r['thread']:20s} {r['voluntary_per_s']:12.0f} {r['involuntary_per_s']:14.0f} "
              f"{r['cpu_share']:6.2f}"
              + (f" {r['switches_per_unit']:14.2f}" if args.per > 0 else ""))
    print(f"{'all':20s} {total_switches:27.0f}/s"
          + (f"  {summary['switches_per_unit']:.2f} per unit" if args.per > 0 else ""))


if __name__ == "__main__":
    main()
