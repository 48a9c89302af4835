#!/usr/bin/env python3
"""Checks what bench/summarize.py makes of a small runs.jsonl: each goal
against Redis everysec is also stated against Redis without persistence,
the two with their own verdicts, the AOF rewrites of the
redis-benchmark runs are listed, and a row of one caller, the hiredis
driver's and redis-benchmark's, is compared with dedupd's own. Standard library only.

  python3 bench/summarize_test.py
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(label, system, variant, throughput, cpu_us, rewrites=None):
    server = {"cpu_seconds": cpu_us, "cpu_s_per_million_claims": cpu_us, "rss_bytes": 1,
              "data_bytes": None}
    if rewrites is not None:
        server["aof_rewrites"] = rewrites
    return {"label": label, "system": system, "variant": variant, "throughput": throughput,
            "claims": 1000000, "elapsed_s": 5.0, "errors": 0,
            "latency_us": {"p50": 100.0, "p99": 200.0, "p999": 300.0}, "server": server,
            "client_cpu_seconds": None, "workload": {"rate": 0}, "machine": {}}


def main():
    runs = []
    for rep in (1, 2, 3):
        runs.append(run(f"main:dedupd:buffered:unique:{rep}", "dedupd", "buffered", 90000, 6.0))
        runs.append(run(f"main:dedupd:buffered:batch64:{rep}", "dedupd", "buffered", 240000, 5.0))
        # everysec: dearer than dedupd, and one rewrite in one run of -P 64.
        runs.append(run(f"main:redis:everysec:rb_p1:{rep}", "redis", "everysec", 60000, 12.0, 0))
        runs.append(run(f"main:redis:everysec:rb_p64:{rep}", "redis", "everysec", 200000, 4.0,
                        1 if rep == 2 else 0))
        # none: cheaper than dedupd.
        runs.append(run(f"main:redis:none:rb_p1:{rep}", "redis", "none", 160000, 5.0, 0))
        runs.append(run(f"main:redis:none:rb_p64:{rep}", "redis", "none", 320000, 2.5, 0))
        # One caller: compared with dedupd's own one caller.
        runs.append(run(f"main:dedupd:buffered:lone:{rep}", "dedupd", "buffered", 8000, 100.0))
        runs.append(run(f"main:redis:none:lone:{rep}", "redis", "none", 16000, 20.0))
        runs.append(run(f"main:redis:none:rb_c1:{rep}", "redis", "none", 20000, 18.0, 0))
    with tempfile.TemporaryDirectory() as out:
        path = os.path.join(out, "runs.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(json.dumps(r) for r in runs) + "\n")
        subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), "--runs=" + path,
                        "--out=" + out], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            goals = {g["goal"]: g for g in json.load(f)["goals"]}
        with open(os.path.join(out, "summary.txt")) as f:
            text = f.read()

    failures = []

    def expect(name, value, met):
        g = goals.get(name)
        if g is None:
            failures.append(f"no goal {name!r}")
        elif g["value"] is None or abs(g["value"] - value) > 1e-9 or g["met"] != met:
            failures.append(f"{name}: got {g['value']} met={g['met']}, want {value} met={met}")

    expect("server CPU per claim, 1 per call: buffered / redis-benchmark -P 1 everysec", 0.5, True)
    expect("server CPU per claim, 1 per call: buffered / redis-benchmark -P 1 none", 1.2, False)
    expect("server CPU per claim, batches of 64: buffered / redis-benchmark -P 64 everysec",
           1.25, False)
    expect("server CPU per claim, batches of 64: buffered / redis-benchmark -P 64 none", 2.0,
           False)
    expect("64 callers, client library: buffered vs redis-benchmark -c 64 -P 1 everysec", 1.5,
           True)
    expect("64 callers, client library: buffered vs redis-benchmark -c 64 -P 1 none", 0.5625,
           False)
    expect("batches of 64: buffered vs redis-benchmark -P 64 everysec", 1.2, True)
    expect("batches of 64: buffered vs redis-benchmark -P 64 none", 0.75, False)
    for line in ("everysec  redis-benchmark -P 64 1 in 3 runs",
                 "everysec  redis-benchmark -P 1 0 in 3 runs"):
        if line not in text:
            failures.append(f"summary.txt lacks the rewrites line {line!r}")
    lone = [line for line in text.splitlines() if "unique keys, 1 caller" in line]
    if len(lone) != 2 or "0.50x vs buffered" not in lone[1]:
        failures.append(f"summary.txt's rows of one caller: {lone!r}")
    reference = [line for line in text.splitlines() if "redis-benchmark -c 1 -P 1" in line]
    if len(reference) != 1 or "0.40x vs buffered lone" not in reference[0]:
        failures.append(f"summary.txt's redis-benchmark row of one client: {reference!r}")
    if "none      redis-benchmark -P 1 0 in" in text:
        failures.append("summary.txt lists rewrites for Redis without persistence")
    for failure in failures:
        print("summarize_test: " + failure, file=sys.stderr)
    if failures:
        sys.exit(1)
    print("summarize_test: ok")


if __name__ == "__main__":
    main()
