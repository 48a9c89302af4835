#!/usr/bin/env python3
"""The measuring half of bench/failover, on a cluster it has started.

Waits until every shard is led and served by its first replica (the
cluster's steady state), faults the node that leads the most shards
(SIGSTOP or SIGKILL, by its pid), and polls the topology from the live
nodes until each shard that node led is led and served by a live node
again, or until the limit. Everything it learns comes
from `dedupctl cluster status --json`: a shard is led and served when its
newest leader (the highest epoch any node reports) answers that it leads
it, with its replicas; a node that does not serve a shard it won reports
none.

Prints one JSON object on stdout (the run's figures, times in seconds from
the fault); progress on stderr. Exit 1 if the cluster did not settle.

  bench/failover_watch.py --dedupctl=PATH --nodes=A,B,C --pids=P,Q,R
      --fault=stop|kill --settle=180 --limit=120 --poll_ms=100
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

PROGRESS_EVERY_S = 5.0
# The deadline of each node's Topology while settling: the nodes are busy
# opening shards and electing, and nothing is measured yet.
SETTLE_CALL_S = 2.0


def log(message):
    print(f"bench/failover: {message}", file=sys.stderr, flush=True)


def cluster_status(dedupctl, endpoints, deadline_s):
    """One `dedupctl cluster status --json` (exit 0, or 16 for a degraded
    cluster, both print the status): the parsed object, or None when no
    node answered or the output does not parse."""
    command = [dedupctl, "--endpoint=" + ",".join(endpoints),
               f"--timeout={max(1, round(deadline_s * 1000))}ms", "cluster", "status", "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=deadline_s * len(endpoints) + 10)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode not in (0, 16):
        return None
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def served(status):
    """shard -> address of the node that leads it and says it serves it."""
    return {row["shard"]: row["leader"] for row in status["shards"]
            if row.get("leader") and row.get("replicas") is not None}


def answered(status, address):
    return not any(u.split(": ", 1)[0] == address for u in status.get("unreachable", []))


def at_home(led, nodes):
    """The shards led by their first replica. A new cluster places shard s
    on nodes s, s+1, ... (mod n), and a leader hands a shard back to its
    first replica once that one has been live for a lease: until then the
    leaders still move without any fault."""
    return [s for s, address in led.items() if address == nodes[s % len(nodes)]]


def settle(args, nodes):
    """Polls until every shard is led and served by its first replica, with
    a live majority (dedupctl reports no problem); the status then, or
    exits 1."""
    start = time.monotonic()
    last_report = start
    last = None
    while True:
        status = cluster_status(args.dedupctl, nodes, SETTLE_CALL_S)
        now = time.monotonic()
        if status is not None:
            last = status
            led = served(status)
            total = len(status["shards"])
            home = at_home(led, nodes)
            if (status.get("replicated") and total > 0 and len(home) == total
                    and not status["problems"] and not status["unreachable"]):
                log(f"all {total} shards led and served by their first replica after "
                    f"{now - start:.1f} s")
                return status, now - start
        if now - last_report >= PROGRESS_EVERY_S:
            last_report = now
            if status is None:
                log(f"waiting for the cluster ({now - start:.0f} s): no node answered")
            else:
                log(f"waiting for the cluster ({now - start:.0f} s): {len(led)} of {total} "
                    f"shards led and served, {len(home)} by their first replica, "
                    f"{len(status['problems'])} problem(s)")
        if now - start >= args.settle:
            problems = last["problems"] if last is not None else ["no node answered"]
            if last is not None:
                led = served(last)
                away = sorted(s for s in led if s not in at_home(led, nodes))
                problems = problems + [f"shard {s} is led by {led[s]}, not its first replica"
                                       for s in away]
            log(f"the cluster did not settle within {args.settle:g} s "
                f"({len(problems)} problem(s)); the first of them:")
            for problem in problems[:5]:
                print(f"  {problem}", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.5)


def busiest(led, nodes):
    """The node leading the most shards (the lowest index of a tie)."""
    counts = {address: 0 for address in nodes}
    for address in led.values():
        counts[address] = counts.get(address, 0) + 1
    return max(nodes, key=lambda a: (counts[a], -nodes.index(a))), counts


def watch(args, nodes, failed, affected, t0):
    """Polls from the live nodes until every affected shard is led and
    served by a live node, or the limit. Returns the figures."""
    live = [a for a in nodes if a != failed]
    poll_s = args.poll_ms / 1000.0
    times = {}
    pending = set(affected)
    others_lost = set()  # Shards the failed node did not lead seen unserved.
    lost_again = set()  # Affected shards seen unserved after they were led again.
    polls = failed_polls = partial_polls = 0
    last_report = time.monotonic()
    while pending:
        start = time.monotonic()
        elapsed = start - t0
        if elapsed >= args.limit:
            break
        status = cluster_status(args.dedupctl, live, poll_s)
        polls += 1
        if status is None:
            failed_polls += 1
        else:
            led = served(status)
            # The time of a shard is the start of the first poll that saw it
            # served by a live node: within a poll interval of the truth.
            for shard in sorted(pending):
                if led.get(shard) not in (None, failed):
                    times[shard] = elapsed
                    pending.discard(shard)
            # Absence counts only when every live node answered: a leader
            # that missed the poll's deadline serves on regardless.
            if not all(answered(status, a) for a in live):
                partial_polls += 1
            else:
                for row in status["shards"]:
                    shard = row["shard"]
                    if led.get(shard) not in (None, failed):
                        continue
                    if shard in times:
                        lost_again.add(shard)
                    elif shard not in pending:
                        others_lost.add(shard)
        now = time.monotonic()
        if now - last_report >= PROGRESS_EVERY_S:
            last_report = now
            log(f"{now - t0:5.1f} s after the fault: {len(times)} of {len(affected)} shards "
                f"led again")
        time.sleep(max(0.0, poll_s - (time.monotonic() - start)))
    end = time.monotonic() - t0
    final = cluster_status(args.dedupctl, live, max(poll_s, 0.5))
    new_leaders = {}
    if final is not None:
        led = served(final)
        for shard in affected:
            if shard in led:
                new_leaders[led[shard]] = new_leaders.get(led[shard], 0) + 1
    return {"times": {str(s): round(t, 3) for s, t in sorted(times.items())},
            "unresolved": sorted(pending), "watched_s": round(end, 3), "polls": polls,
            "failed_polls": failed_polls, "partial_polls": partial_polls,
            "mean_poll_s": round(end / polls, 3) if polls else None,
            "others_without_leader": sorted(others_lost), "lost_again": sorted(lost_again),
            "new_leaders": new_leaders}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dedupctl", required=True)
    parser.add_argument("--nodes", required=True, help="addresses, in index order")
    parser.add_argument("--pids", required=True, help="the nodes' pids, in the same order")
    parser.add_argument("--fault", choices=("stop", "kill"), default="stop")
    parser.add_argument("--settle", type=float, default=180)
    parser.add_argument("--limit", type=float, default=120)
    parser.add_argument("--poll_ms", type=float, default=100)
    args = parser.parse_args()
    nodes = args.nodes.split(",")
    pids = [int(p) for p in args.pids.split(",")]
    if len(nodes) != len(pids):
        parser.error("--nodes and --pids differ in length")

    status, settle_s = settle(args, nodes)
    led = served(status)
    failed, counts = busiest(led, nodes)
    affected = sorted(s for s, a in led.items() if a == failed)
    log(f"shards led: " + ", ".join(f"{a} {counts[a]}" for a in nodes) +
        f"; {'SIGSTOP' if args.fault == 'stop' else 'SIGKILL'} to {failed}")
    t0 = time.monotonic()
    os.kill(pids[nodes.index(failed)], signal.SIGSTOP if args.fault == "stop" else signal.SIGKILL)
    figures = watch(args, nodes, failed, affected, t0)
    print(json.dumps({"fault": args.fault, "failed_node": failed,
                      "failed_index": nodes.index(failed), "shards": len(status["shards"]),
                      "led_before": counts, "affected": affected, "settle_s": round(settle_s, 1),
                      "limit_s": args.limit, "poll_ms": args.poll_ms, **figures}))


if __name__ == "__main__":
    main()
