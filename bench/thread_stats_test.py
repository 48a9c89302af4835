#!/usr/bin/env python3
"""Checks bench/thread_stats.py: a live snapshot of a process names its
threads and sees their CPU grow, and a diff groups threads by role, counts
their CPU and switches, and reports threads that ended. Standard library
only.

  python3 bench/thread_stats_test.py
"""
import json
import os
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import thread_stats  # noqa: E402


def thread(name, ns, voluntary, involuntary=0):
    return {"name": name, "ns": ns, "voluntary": voluntary, "involuntary": involuntary}


def main():
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    before = {"hz": 100, "processes": {"1": 100},
              "threads": {"1/1": thread("worker", 0, 0), "1/2": thread("worker", 1_000_000_000, 5),
                          "1/3": thread("ship-to-1", 0, 0), "1/4": thread("gone", 0, 0)}}
    after = {"hz": 100, "processes": {"1": 400},
             "threads": {"1/1": thread("worker", 500_000_000, 3),
                         "1/2": thread("worker", 1_500_000_000, 9, 2),
                         "1/3": thread("ship-to-1", 250_000_000, 1),
                         "1/5": thread("ship-to-2", 250_000_000, 4)}}
    got = thread_stats.diff(before, after)
    roles = got["roles"]
    check(set(roles) == {"worker", "ship-to"}, f"roles {sorted(roles)}")
    check(roles["worker"]["threads"] == 2 and abs(roles["worker"]["cpu_s"] - 1.0) < 1e-9,
          f"worker {roles['worker']}")
    check(roles["worker"]["voluntary"] == 7 and roles["worker"]["involuntary"] == 2,
          f"worker switches {roles['worker']}")
    # A thread first seen in AFTER counts from zero.
    check(roles["ship-to"]["threads"] == 2 and abs(roles["ship-to"]["cpu_s"] - 0.5) < 1e-9
          and roles["ship-to"]["voluntary"] == 5, f"ship-to {roles['ship-to']}")
    check(abs(got["cpu_s"] - 1.5) < 1e-9, f"total {got['cpu_s']}")
    check(abs(got["process_cpu_s"] - 3.0) < 1e-9, f"process {got['process_cpu_s']}")
    check(got["threads_ended"] == 1, f"ended {got['threads_ended']}")

    # A live process: this one, with a named thread that burns CPU.
    with tempfile.TemporaryDirectory() as tmp:
        pid = str(os.getpid())
        first, second = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
        subprocess.run([sys.executable, os.path.join(HERE, "thread_stats.py"), "snap", first, pid],
                       check=True)
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                sum(range(1000))

        spinner = threading.Thread(target=spin, name="spinner")
        spinner.start()
        threading.Event().wait(0.3)
        stop.set()
        spinner.join()
        # The spinner has ended: the main thread's CPU and the count show it.
        subprocess.run([sys.executable, os.path.join(HERE, "thread_stats.py"), "snap", second, pid],
                       check=True)
        out = subprocess.run([sys.executable, os.path.join(HERE, "thread_stats.py"), "diff", first,
                              second], check=True, capture_output=True, text=True).stdout
        live = json.loads(out)
        check(live["process_cpu_s"] > 0.1, f"live process CPU {live['process_cpu_s']}")
        check(live["threads_ended"] == 0, f"live ended {live['threads_ended']}")
        check(len(live["roles"]) >= 1, f"live roles {live['roles']}")

    if failures:
        print("thread_stats_test: FAILED\n  " + "\n  ".join(failures))
        return 1
    print("thread_stats_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
