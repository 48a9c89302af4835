#!/usr/bin/env python3
"""Where a server's CPU and context switches go, by thread name, from /proc.

dedupd names its threads by role (worker, ship-to-N, wal-sync, ...; gRPC's
own are nexting_thread, grpcpp_sync_ser...). Two commands:

  thread_stats.py snap OUT PID...
      Writes every thread of the PIDs to OUT (JSON): name, time on a CPU
      (schedstat, in ns), voluntary and involuntary context switches, and
      the processes' own utime+stime in clock ticks.
  thread_stats.py diff BEFORE AFTER
      Prints one JSON object: per role (the thread name without a trailing
      number, so ship-to-1 and ship-to-2 are one role), the threads seen,
      CPU in seconds and context switches between the two snapshots; their
      sum; the processes' own CPU over the same time from stat, to compare;
      and how many threads of BEFORE had ended by AFTER. A thread that
      started and ended in between is in no role, only in the processes'
      CPU.
"""
import json
import os
import re
import sys


def read_thread(pid, tid):
    base = f"/proc/{pid}/task/{tid}"
    with open(f"{base}/comm") as f:
        name = f.read().strip()
    switches = {}
    with open(f"{base}/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                key, value = line.split(":")
                switches[key] = int(value)
    # Time on a CPU in nanoseconds, exact; the utime and stime of stat are
    # ticks, each thread's rounded on its own, which over a hundred threads
    # adds up to a visible error.
    with open(f"{base}/schedstat") as f:
        on_cpu_ns = int(f.read().split()[0])
    return {"name": name, "ns": on_cpu_ns,
            "voluntary": switches.get("voluntary_ctxt_switches", 0),
            "involuntary": switches.get("nonvoluntary_ctxt_switches", 0)}


def snap(pids):
    threads, processes = {}, {}
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        processes[pid] = int(fields[11]) + int(fields[12])
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                threads[f"{pid}/{tid}"] = read_thread(pid, tid)
            except (FileNotFoundError, ProcessLookupError):
                pass  # Ended while being listed.
    return {"hz": os.sysconf("SC_CLK_TCK"), "threads": threads, "processes": processes}


def role(name):
    return re.sub(r"[-_]?\d+$", "", name) or name


def diff(before, after):
    hz = after["hz"]
    roles = {}
    for key, now in after["threads"].items():
        then = before["threads"].get(key, {"ns": 0, "voluntary": 0, "involuntary": 0})
        entry = roles.setdefault(role(now["name"]), {"threads": 0, "cpu_s": 0.0,
                                                     "voluntary": 0, "involuntary": 0})
        entry["threads"] += 1
        entry["cpu_s"] += (now["ns"] - then["ns"]) / 1e9
        entry["voluntary"] += now["voluntary"] - then["voluntary"]
        entry["involuntary"] += now["involuntary"] - then["involuntary"]
    process_ticks = sum(after["processes"][pid] - before["processes"].get(pid, 0)
                        for pid in after["processes"])
    return {"cpu_s": sum(r["cpu_s"] for r in roles.values()),
            "process_cpu_s": process_ticks / hz,
            "threads_ended": sum(1 for key in before["threads"] if key not in after["threads"]),
            "roles": roles}


def main(argv):
    if len(argv) >= 3 and argv[1] == "snap":
        with open(argv[2], "w") as f:
            json.dump(snap(argv[3:]), f)
        return 0
    if len(argv) == 4 and argv[1] == "diff":
        with open(argv[2]) as f:
            before = json.load(f)
        with open(argv[3]) as f:
            after = json.load(f)
        print(json.dumps(diff(before, after)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
