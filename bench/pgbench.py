#!/usr/bin/env python3
"""PostgreSQL's own load generator as the reference PostgreSQL figure for bench/compare.

Runs `pgbench` against a PostgreSQL already started by bench/servers.sh, with
the claim done as PostgreSQL users do it, `INSERT ... ON CONFLICT (k) DO
NOTHING` of random keys into a table with a primary key, as prepared
statements (`-M prepared`), one transaction per claim (--rows=1) or one
INSERT of 64 rows per transaction (--rows=64, the shape of dedup_bench's
batches). synchronous_commit is set for pgbench's sessions through PGOPTIONS.
Prints one JSON line in the shape dedup_bench writes, so that
bench/summarize.py treats it as another row.

Server CPU is PostgreSQL's whole process tree from /proc before and after:
utime + stime of the postmaster and every living process below it, plus the
postmaster's cutime + cstime, where the CPU of pgbench's backends lands when
they exit. Latency percentiles come from pgbench's per-transaction log; with
--rows=64 they are per transaction of 64 claims, as dedup_bench's are per
batch.

  pgbench.py --port=5432 --pid=1234 --synchronous_commit=on --rows=1 \\
      --clients=64 --seconds=6 --label=main:postgres:sync_on:pgb_p1:1 --variant=sync_on
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

from peer_row import print_row

TABLE = "claims_pgbench"


def proc_stat(pid):
    """(ppid, utime + stime, cutime + cstime) in ticks, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command: state, ppid, ... utime at 11, stime 12, cutime 13, cstime 14.
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def tree_cpu_seconds(root):
    """CPU of root's process tree, counting exited children through root's cutime."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
    if root not in stats:
        sys.exit(f"pgbench: no process {root}")
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _, _) in stats.items():
            if pid not in tree and ppid in tree:
                tree.add(pid)
                grew = True
    ticks = sum(stats[pid][1] for pid in tree) + stats[root][2]
    return ticks / os.sysconf("SC_CLK_TCK")


def client_backends(root):
    """The postmaster's children that serve a TCP client (pgbench's backends)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (proc_stat(int(entry)) or (0,))[0] != root:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"127.0.0.1(" in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def script_text(rows, lease_seconds):
    """The pgbench script: `rows` random keys, one INSERT of all of them."""
    lines = [f"\\set k{i} random(1, 1000000000000)" for i in range(1, rows + 1)]
    values = ", ".join(
        f"('claim:' || :k{i}, 'owner', now() + interval '{lease_seconds} seconds')"
        for i in range(1, rows + 1))
    lines.append(f"INSERT INTO {TABLE} (k, owner, expires_at) VALUES {values} "
                 "ON CONFLICT (k) DO NOTHING;")
    return "\n".join(lines) + "\n"


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return float(sorted_values[index])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True, help="the postmaster's pid")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--user", default="postgres")
    parser.add_argument("--database", default="postgres")
    parser.add_argument("--data_dir", default="", help="PostgreSQL's data directory, for its size")
    parser.add_argument("--synchronous_commit", choices=["on", "off"], required=True)
    parser.add_argument("--rows", type=int, default=1, help="claims per INSERT (1 or 64)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="pgbench -j")
    parser.add_argument("--seconds", type=int, required=True, help="pgbench -T")
    parser.add_argument("--lease_seconds", type=int, default=60)
    parser.add_argument("--label", required=True)
    parser.add_argument("--variant", required=True)
    args = parser.parse_args()
    if args.rows < 1 or args.clients < 1 or args.seconds < 1:
        sys.exit("pgbench: --rows, --clients and --seconds must be at least 1")

    env = dict(os.environ, PGOPTIONS=f"-c synchronous_commit={args.synchronous_commit}")
    connect = ["-h", args.host, "-p", str(args.port), "-U", args.user]
    create = subprocess.run(
        ["psql", *connect, "-d", args.database, "-v", "ON_ERROR_STOP=1", "-qc",
         f"CREATE TABLE IF NOT EXISTS {TABLE} (k text PRIMARY KEY, owner text NOT NULL,"
         " expires_at timestamptz NOT NULL)"],
        capture_output=True, text=True, timeout=60)
    if create.returncode != 0:
        sys.exit(f"pgbench: creating {TABLE} failed: {create.stderr.strip()}")

    with tempfile.TemporaryDirectory(prefix="pgbench-") as tmp:
        script = os.path.join(tmp, "claim.sql")
        with open(script, "w") as f:
            f.write(script_text(args.rows, args.lease_seconds))
        command = ["pgbench", *connect, "-n", "-M", "prepared", "-c", str(args.clients),
                   "-j", str(args.threads), "-T", str(args.seconds), "-f", script,
                   "-l", "--log-prefix", os.path.join(tmp, "tx"), args.database]
        cpu_before = tree_cpu_seconds(args.pid)
        start = time.monotonic()
        ran = subprocess.run(command, capture_output=True, text=True, env=env,
                             timeout=args.seconds + 120)
        elapsed = time.monotonic() - start
        # The backends exit as pgbench disconnects; wait until the postmaster
        # has reaped them, so that their CPU is in its cutime.
        deadline = time.monotonic() + 10
        while client_backends(args.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        cpu_after = tree_cpu_seconds(args.pid)
        if ran.returncode != 0:
            sys.exit(f"pgbench: {' '.join(command)} failed: {ran.stderr.strip()}")
        processed = re.search(r"number of transactions actually processed: (\d+)", ran.stdout)
        failed = re.search(r"number of failed transactions: (\d+)", ran.stdout)
        tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", ran.stdout)
        if not processed or not tps:
            sys.exit(f"pgbench: unexpected output: {ran.stdout!r}")
        # Per-transaction log lines: client_id transaction_no time_us script_no ...
        latencies = []
        for path in glob.glob(os.path.join(tmp, "tx.*")):
            with open(path) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) >= 3 and fields[2].isdigit():
                        latencies.append(int(fields[2]))
        latencies.sort()

    transactions = int(processed.group(1))
    claims = transactions * args.rows
    server_cpu = cpu_after - cpu_before
    print_row(label=args.label, tool="pgbench",
              command=" ".join(command[:command.index("-f")] + ["-f", "claim.sql", args.database]),
              system="postgres", variant=args.variant,
              throughput=float(tps.group(1)) * args.rows, claims=claims, elapsed_s=elapsed,
              errors=int(failed.group(1)) if failed else 0,
              latency_us={"p50": percentile(latencies, 0.50), "p99": percentile(latencies, 0.99),
                          "p999": percentile(latencies, 0.999),
                          "max": float(latencies[-1]) if latencies else None},
              server_cpu=server_cpu, pid=args.pid, data_dir=args.data_dir,
              callers=args.clients, batch=args.rows)


if __name__ == "__main__":
    main()
