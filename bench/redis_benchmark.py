#!/usr/bin/env python3
"""Redis's own load generator as the reference Redis figure for bench/compare.

Runs `redis-benchmark` against a Redis already started by bench/servers.sh,
with the claim done as Redis users do it, `SET key owner NX EX 60` on random
keys, and prints one JSON line in the shape dedup_bench writes, so that
bench/summarize.py treats it as another row. Server CPU comes from
/proc/PID/stat (utime + stime) before and after, like dedup_bench's.

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
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 (utime, stime) are at 11 and 12 after the command.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True, help="redis-server's pid")
    parser.add_argument("--data_dir", default="", help="Redis's directory, for its size")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--pipeline", type=int, default=1)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()

    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(args.port),
               "-c", str(args.clients), "-P", str(args.pipeline), "-n", str(args.requests),
               "-r", "1000000000", "--csv",
               "SET", "claim:__rand_int__", "owner", "NX", "EX", "60"]
    cpu_before = cpu_seconds(args.pid)
    start = time.monotonic()
    ran = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    elapsed = time.monotonic() - start
    cpu_after = cpu_seconds(args.pid)
    if ran.returncode != 0:
        sys.exit(f"redis_benchmark: {' '.join(command)} failed: {ran.stderr.strip()}")
    rows = list(csv.DictReader(io.StringIO(ran.stdout)))
    if not rows:
        sys.exit(f"redis_benchmark: no CSV row in: {ran.stdout!r}")
    row = rows[-1]
    rps = float(row["rps"])
    server_cpu = cpu_after - cpu_before

    def us(column):
        value = row.get(column)
        return float(value) * 1000 if value not in (None, "") else None

    print_row(label=args.label, tool="redis-benchmark", command=" ".join(command),
              system="redis", variant=args.variant, throughput=rps, claims=args.requests,
              elapsed_s=elapsed, errors=0,
              latency_us={"p50": us("p50_latency_ms"), "p99": us("p99_latency_ms"),
                          "p999": None, "max": us("max_latency_ms")},
              server_cpu=server_cpu, pid=args.pid, data_dir=args.data_dir,
              callers=args.clients, batch=args.pipeline)


if __name__ == "__main__":
    main()
