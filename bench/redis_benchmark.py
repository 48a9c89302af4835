#!/usr/bin/env python3
"""Redis's own load generator as the reference Redis figure for bench/compare.

Runs `redis-benchmark` against a Redis already started by bench/servers.sh,
with the claim done as Redis users do it, `SET key owner NX EX <seconds>` on
random keys, and prints one JSON line in the shape dedup_bench writes, so that
bench/summarize.py treats it as another row. Server CPU comes from
/proc/PID/stat (utime + stime) before and after, like dedup_bench's.

With the AOF on, Redis rewrites it in a forked child once it has grown
enough (auto-aof-rewrite-percentage, on by default). The child's CPU is
Redis's cost of keeping its log bounded, as compaction is dedupd's, so it
counts as server CPU: the run waits for a rewrite begun before it to end,
and after it for one begun during it, and adds the CPU of the children
Redis reaped meanwhile (cutime + cstime). The row records how many
rewrites ran, since one that overlaps a run also slows Redis's parent
(copy-on-write faults on every page a write touches).

  redis_benchmark.py --port=6379 --pid=1234 --pipeline=64 --clients=64 \\
      --requests=2000000 --label=main:redis:everysec:rb_p64:1 --variant=everysec
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import time

from peer_row import print_row


def cpu_seconds(pid):
    """(own, reaped children's) CPU seconds of pid."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 to 17 (utime, stime, cutime, cstime) are at 11 to 14 after
    # the command.
    tick = os.sysconf("SC_CLK_TCK")
    return ((int(fields[11]) + int(fields[12])) / tick,
            (int(fields[13]) + int(fields[14])) / tick)


def persistence(port):
    """Redis's INFO persistence as a dict."""
    ran = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "info", "persistence"],
                         capture_output=True, text=True, timeout=10, check=True)
    return dict(line.strip().split(":", 1) for line in ran.stdout.splitlines() if ":" in line)


def wait_for_rewrite(port, timeout):
    """Waits until no AOF rewrite runs or is scheduled; returns the count of
    rewrites Redis has done."""
    deadline = time.monotonic() + timeout
    while True:
        info = persistence(port)
        if info.get("aof_rewrite_in_progress", "0") == "0" and \
                info.get("aof_rewrite_scheduled", "0") == "0":
            return int(info.get("aof_rewrites", "0"))
        if time.monotonic() > deadline:
            sys.exit(f"redis_benchmark: an AOF rewrite still runs after {timeout:.0f} s")
        time.sleep(0.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True, help="redis-server's pid")
    parser.add_argument("--data_dir", default="", help="Redis's directory, for its size")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--pipeline", type=int, default=1)
    parser.add_argument("--ex_seconds", type=int, default=60, help="each key's EX")
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()

    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(args.port),
               "-c", str(args.clients), "-P", str(args.pipeline), "-n", str(args.requests),
               "-r", "1000000000", "--csv",
               "SET", "claim:__rand_int__", "owner", "NX", "EX", str(args.ex_seconds)]
    rewrites_before = wait_for_rewrite(args.port, args.timeout)
    cpu_before, children_before = cpu_seconds(args.pid)
    start = time.monotonic()
    ran = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    elapsed = time.monotonic() - start
    cpu_after, _ = cpu_seconds(args.pid)
    rewrites = wait_for_rewrite(args.port, args.timeout) - rewrites_before
    _, children_after = cpu_seconds(args.pid)
    if ran.returncode != 0:
        sys.exit(f"redis_benchmark: {' '.join(command)} failed: {ran.stderr.strip()}")
    rows = list(csv.DictReader(io.StringIO(ran.stdout)))
    if not rows:
        sys.exit(f"redis_benchmark: no CSV row in: {ran.stdout!r}")
    row = rows[-1]
    rps = float(row["rps"])
    rewrite_cpu = children_after - children_before
    server_cpu = cpu_after - cpu_before + rewrite_cpu

    def us(column):
        value = row.get(column)
        return float(value) * 1000 if value not in (None, "") else None

    print_row(label=args.label, tool="redis-benchmark", command=" ".join(command),
              system="redis", variant=args.variant, throughput=rps, claims=args.requests,
              elapsed_s=elapsed, errors=0,
              latency_us={"p50": us("p50_latency_ms"), "p99": us("p99_latency_ms"),
                          "p999": None, "max": us("max_latency_ms")},
              server_cpu=server_cpu, pid=args.pid, data_dir=args.data_dir,
              callers=args.clients, batch=args.pipeline,
              extra={"aof_rewrites": rewrites, "aof_rewrite_cpu_seconds": rewrite_cpu})


if __name__ == "__main__":
    main()
