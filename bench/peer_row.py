"""What bench/redis_benchmark.py and bench/pgbench.py share: the server's
memory and data from /proc and the file system, and one peer-tool run as a
JSON line in the shape dedup_bench writes, so that bench/summarize.py
treats it as another row."""
import json
import os


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


def print_row(*, label, tool, command, system, variant, throughput, claims, elapsed_s, errors,
              latency_us, server_cpu, pid, data_dir, callers, batch, extra=None):
    """Prints the run as one JSON line. The tool's own CPU is not measured;
    extra: more fields of the server's, such as Redis's AOF rewrites."""
    server = {
        "cpu_seconds": server_cpu,
        "cpu_s_per_million_claims": server_cpu * 1e6 / claims if claims else None,
        "rss_bytes": rss_bytes(pid),
        "data_bytes": dir_bytes(data_dir) if data_dir else None,
    }
    server.update(extra or {})
    print(json.dumps({
        "label": label,
        "tool": tool,
        "command": command,
        "system": system,
        "variant": variant,
        "throughput": throughput,
        "claims": claims,
        "elapsed_s": elapsed_s,
        "errors": errors,
        "latency_us": latency_us,
        "server": server,
        "client_cpu_seconds": None,
        "workload": {"callers": callers, "batch": batch, "rate": 0},
        "machine": {},
    }))
