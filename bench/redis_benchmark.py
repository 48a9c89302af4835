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
import json
import os
import subprocess
import sys
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 (utime, stime) are at 11 and 12 after the command.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


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

    print(json.dumps({
        "label": args.label,
        "tool": "redis-benchmark",
        "command": " ".join(command),
        "system": "redis",
        "variant": args.variant,
        "throughput": rps,
        "claims": args.requests,
        "elapsed_s": elapsed,
        "errors": 0,
        "latency_us": {"p50": us("p50_latency_ms"), "p99": us("p99_latency_ms"),
                       "p999": None, "max": us("max_latency_ms")},
        "server": {
            "cpu_seconds": server_cpu,
            "cpu_s_per_million_claims": server_cpu * 1e6 / args.requests,
            "rss_bytes": rss_bytes(args.pid),
            "data_bytes": dir_bytes(args.data_dir) if args.data_dir else None,
        },
        # redis-benchmark's own CPU is not measured here.
        "client_cpu_seconds": None,
        "workload": {"callers": args.clients, "batch": args.pipeline, "rate": 0},
        "machine": {},
    }))


if __name__ == "__main__":
    main()
