#!/usr/bin/python3
"""A real Prometheus over a live replicated dedupd cluster.

    check_prometheus.py --dedupd build/server/dedupd \\
        --consumer build/client/examples/payment_consumer --deploy deploy

Starts etcd and three dedupd nodes (replication_factor 3, 16 shards) on
127.0.0.1, node 2's data directory on a 512 MiB ext4 file system of its own
(a loop device; root only), and Prometheus (Debian's `prometheus`) with
deploy/prometheus/scrape-config.yaml's dedupd job aimed at the three nodes
and deploy/prometheus/dedupd-alerts.yaml as its rules. Scrape and rule
evaluation run every second, and every alert's `for` is cut to FOR_SECONDS
so that a state change shows in seconds; the expressions are the shipped
ones. Then, through Prometheus' HTTP API:

1. Volume. A file filling node 2's volume turns DedupdVolumeFillingIn6h
   pending within two scrape and two evaluation intervals (plus dedupd's
   stats refresh), firing within `for` more; removing it clears the alert.
2. Load. The field experiment's consumer fleet (client/examples/
   payment_consumer: 2,000 payments, one in 20 redelivered while in
   progress) runs against the cluster. dedup_duplicates_intercepted_total,
   summed over the nodes, must equal exactly the duplicates the fleet met
   (kind completed and in_progress, as it counts them), and the dashboard's
   headline panel ("Duplicates intercepted per namespace"), as a range
   query over the load, must add up to that number within 25% (a rate over
   scrapes is an estimate).
3. Panels. Every expression of every panel of deploy/grafana/
   dedupd-dashboard.json, its template variables substituted as Grafana
   does (All, then one value of each), evaluated at the end of the
   load, returns at least one series; so does every template variable's
   query. The panels in EMPTY_BY_DESIGN may be empty, and their
   descriptions must say when.
4. A lost replica. SIGTERM to node 0: DedupdShardReplicaDown (a shard with
   fewer live replicas than its replication factor) and DedupdTargetDown
   go pending within two scrape and two evaluation intervals and firing
   within `for` more; node 0 started again on its data directory, both
   clear.

Exits 0 when everything holds, 1 with the failures listed, 77 (ctest:
skipped) when prometheus or etcd is not installed. Without root (no loop
device), step 1 is skipped with a note. Everything listens on 127.0.0.1 and
is stopped by process id; the file system is unmounted at the end.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

SCRAPE_SECONDS = 1
EVAL_SECONDS = 1
FOR_SECONDS = 5
# dedupd refreshes its storage gauges (volume free bytes) this often.
STATS_SECONDS = 0.5
# Beyond the intervals: an HTTP round trip, a process start, a busy machine.
SLACK_SECONDS = 2
# An alert's state follows a change within this long (two scrapes, two
# evaluations, dedupd's refresh), and goes firing `for` later.
PENDING_WITHIN = 2 * SCRAPE_SECONDS + 2 * EVAL_SECONDS + STATS_SECONDS + SLACK_SECONDS
FIRING_WITHIN = FOR_SECONDS + PENDING_WITHIN
SHARDS = 16
PAYMENTS = 2000
NAMESPACE = "payment-callback"
HEADLINE_PANEL = "Duplicates intercepted per namespace"

# Panels that may return nothing on a healthy cluster, by title, with the
# reason; each one's description must contain the quoted phrase.
EMPTY_BY_DESIGN = {
    "Shard moves: bytes sent to the target": (
        "Empty when nothing moves",
        "dedup_replication_move_copied_bytes has samples only while a shard moves"),
}

failures = []


def check(ok, what, detail=""):
    if ok:
        print("ok - " + what, flush=True)
    else:
        failures.append(what)
        print("FAIL: " + what + (": " + detail if detail else ""), flush=True)
    return ok


def note(message):
    print("note: " + message, flush=True)


class Fatal(Exception):
    pass


# ------------------------------------------------------------------ processes


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http_get(url, timeout=3.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def wait_for(what, seconds, predicate, interval=0.2):
    """Polls predicate until it returns a true value; returns it, or raises."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Fatal("%s: not within %ss" % (what, seconds))
        time.sleep(interval)


def log_tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


class Processes:
    """Processes started by this check, stopped by their pid at the end."""

    def __init__(self):
        self.procs = {}

    def start(self, name, argv, log):
        with open(log, "a") as f:
            self.procs[name] = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        return self.procs[name]

    def stop(self, name, sig=signal.SIGTERM, timeout=30):
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def stop_all(self):
        for name in list(self.procs):
            self.stop(name)


# ----------------------------------------------------------------- Prometheus


class Prometheus:
    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port

    def api(self, path, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        status, body = http_get(url, timeout=10)
        if status != 200:
            raise Fatal("Prometheus %s answered %s: %s" % (path, status, body[:300]))
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise Fatal("Prometheus %s: %s" % (path, body[:300]))
        return answer["data"]

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = "%.3f" % at
        return self.api("/api/v1/query", **params)["result"]

    def query_range(self, expr, start, end, step):
        return self.api("/api/v1/query_range", query=expr, start="%.3f" % start,
                        end="%.3f" % end, step=str(step))["result"]

    def alerts(self, name, **labels):
        """States (pending/firing) of the active alerts called name whose
        labels include `labels`."""
        states = []
        for alert in self.api("/api/v1/alerts")["alerts"]:
            have = alert["labels"]
            if have.get("alertname") == name and all(have.get(k) == v for k, v in labels.items()):
                states.append(alert["state"])
        return states


def await_alerts(prom, since, alerts):
    """Watches the alerts [(name, labels)] at once until each has gone pending
    and then firing; checks the time each took from `since`
    (time.monotonic()) against the bounds."""
    pending, firing = {}, {}
    deadline = since + FIRING_WITHIN + 30
    while len(firing) < len(alerts) and time.monotonic() < deadline:
        for name, labels in alerts:
            states = prom.alerts(name, **labels)
            now = time.monotonic() - since
            if states and name not in pending:
                pending[name] = now
            if "firing" in states and name not in firing:
                firing[name] = now
        time.sleep(0.1)
    for name, labels in alerts:
        what = name + (" %s" % labels if labels else "")
        if name not in firing:
            check(False, what + " goes pending and firing",
                  "%s, not firing within %.0fs" % (
                      "pending after %.1fs" % pending[name] if name in pending else "never pending",
                      deadline - since))
            continue
        check(pending[name] <= PENDING_WITHIN, "%s pending after %.1fs (bound %.1fs)" %
              (what, pending[name], PENDING_WITHIN))
        check(firing[name] <= FIRING_WITHIN, "%s firing after %.1fs (bound: for %ds + %.1fs)" %
              (what, firing[name], FOR_SECONDS, PENDING_WITHIN))


def await_clear(prom, name, since, seconds, labels=None):
    labels = labels or {}
    try:
        wait_for(name + " cleared", seconds, lambda: not prom.alerts(name, **labels),
                 interval=0.2)
        check(True, "%s cleared %.1fs later" % (name, time.monotonic() - since))
    except Fatal as e:
        check(False, name + " clears", str(e))


# ---------------------------------------------------------------- the cluster


class Cluster:
    def __init__(self, args, work, procs):
        self.args, self.work, self.procs = args, work, procs
        ports = free_ports(3 + 3 + 2)
        self.grpc = ports[0:3]
        self.metrics = ports[3:6]
        self.etcd_client, self.etcd_peer = ports[6], ports[7]
        self.data = [os.path.join(work, "node-%d" % i) for i in range(3)]
        self.config = os.path.join(work, "dedupd.textproto")
        with open(self.config, "w") as f:
            f.write('shards: %d\nstats_interval: "%dms"\n' % (SHARDS, STATS_SECONDS * 1000))

    @property
    def endpoint(self):
        return ",".join("127.0.0.1:%d" % p for p in self.grpc)

    def instance(self, i):
        return "127.0.0.1:%d" % self.metrics[i]

    def start_etcd(self):
        client = "http://127.0.0.1:%d" % self.etcd_client
        peer = "http://127.0.0.1:%d" % self.etcd_peer
        self.procs.start("etcd", [
            "etcd", "--name", "prometheus-check", "--data-dir", os.path.join(self.work, "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "prometheus-check=" + peer], os.path.join(self.work, "etcd.log"))
        wait_for("etcd healthy", 30, lambda: http_get(client + "/health")[0] == 200)

    def start_node(self, i):
        log = os.path.join(self.work, "node-%d.log" % i)
        proc = self.procs.start("node-%d" % i, [
            self.args.dedupd, "--config=" + self.config, "--data_dir=" + self.data[i],
            "--listen=127.0.0.1:%d" % self.grpc[i],
            "--metrics_listen=127.0.0.1:%d" % self.metrics[i],
            "--cluster_nodes=" + self.endpoint, "--node_index=%d" % i,
            "--replication_factor=3", "--etcd_endpoints=127.0.0.1:%d" % self.etcd_client,
            "--durability=buffered"], log)

        def ready():
            if proc.poll() is not None:
                raise Fatal("node %d exited %s; its log:\n%s" % (i, proc.returncode, log_tail(log)))
            return http_get("http://127.0.0.1:%d/readyz" % self.metrics[i], timeout=1)[0] == 200
        wait_for("node %d ready" % i, 60, ready)

    def stop_node(self, i):
        return self.procs.stop("node-%d" % i)


def mount_small_volume(path, work):
    """Mounts a 512 MiB ext4 file system on path; returns an unmount function,
    or None when this machine cannot (not root, no loop device)."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        return None
    image = os.path.join(work, "volume.img")
    with open(image, "wb") as f:
        f.truncate(512 * 1024 * 1024)
    os.makedirs(path, exist_ok=True)
    for argv in (["mkfs.ext4", "-q", "-F", image], ["mount", "-o", "loop", image, path]):
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            note("%s failed: %s" % (" ".join(argv[:2]), r.stderr.strip()))
            return None

    def unmount():
        subprocess.run(["umount", path], capture_output=True)
    return unmount


def start_prometheus(args, cluster, work, procs):
    port = free_ports(1)[0]
    rules_in = os.path.join(args.deploy, "prometheus", "dedupd-alerts.yaml")
    with open(rules_in) as f:
        rules = yaml.safe_load(f)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = "%ds" % FOR_SECONDS
    rules_out = os.path.join(work, "dedupd-alerts.yaml")
    with open(rules_out, "w") as f:
        yaml.safe_dump(rules, f)

    with open(os.path.join(args.deploy, "prometheus", "scrape-config.yaml")) as f:
        config = yaml.safe_load(f)
    config["global"].update(scrape_interval="%ds" % SCRAPE_SECONDS,
                            evaluation_interval="%ds" % EVAL_SECONDS,
                            scrape_timeout="%ds" % SCRAPE_SECONDS)
    config["rule_files"] = [rules_out]
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == "dedupd"]
    if len(jobs) != 1:
        raise Fatal("scrape-config.yaml has no job dedupd")
    job = jobs[0]
    job.update(scrape_interval="%ds" % SCRAPE_SECONDS, scrape_timeout="%ds" % SCRAPE_SECONDS)
    job["static_configs"][0]["targets"] = [cluster.instance(i) for i in range(3)]
    # The blackbox_exporter job needs an exporter this check does not run.
    config["scrape_configs"] = [job]
    config_path = os.path.join(work, "prometheus.yml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)

    procs.start("prometheus", [
        args.prometheus, "--config.file=" + config_path,
        "--storage.tsdb.path=" + os.path.join(work, "prometheus-data"),
        "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
        os.path.join(work, "prometheus.log"))
    prom = Prometheus(port)
    wait_for("Prometheus ready", 60, lambda: http_get(prom.base + "/-/ready", 1)[0] == 200)
    return prom


# ------------------------------------------------------------------ the steps


def step_volume(prom, cluster, volume):
    instance = {"instance": cluster.instance(2)}
    # dedupd's first writes shrink a new volume: wait for a steady slope.
    try:
        wait_for("DedupdVolumeFillingIn6h inactive before the fill", 90,
                 lambda: len(prom.query('dedup_storage_volume_free_bytes{instance="%s"}'
                                        % instance["instance"])) == 1
                 and not prom.alerts("DedupdVolumeFillingIn6h", **instance), interval=0.5)
    except Fatal as e:
        check(False, "node 2's volume steady before the fill", str(e))
        return
    free = os.statvfs(volume)
    fill_bytes = free.f_bavail * free.f_frsize - 64 * 1024 * 1024
    filler = os.path.join(volume, "filler")
    started = time.monotonic()
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, fill_bytes)
    print("filled node 2's volume with %d MiB (64 MiB left)" % (fill_bytes >> 20), flush=True)
    await_alerts(prom, started, [("DedupdVolumeFillingIn6h", instance)])
    os.unlink(filler)
    await_clear(prom, "DedupdVolumeFillingIn6h", time.monotonic(), 90, instance)


def run_load(args, cluster):
    started = time.time()
    r = subprocess.run([args.consumer, "--endpoint=" + cluster.endpoint, "--ns=" + NAMESPACE,
                        "--payments=%d" % PAYMENTS, "--threads=8", "--redeliver_every=20",
                        "--run_id=prometheus-check-%d" % os.getpid()],
                       capture_output=True, text=True, timeout=300)
    ended = time.time()
    print(r.stdout.strip(), flush=True)
    if r.returncode != 0:
        raise Fatal("payment_consumer exited %d: %s" % (r.returncode, r.stderr[-500:]))
    report = dict(kv.split("=", 1) for kv in r.stdout.split())
    return report, started, ended


def step_counters(prom, report, dashboard, load_start, load_end):
    duplicates = int(report["duplicates"])
    in_progress = int(report["in_progress"])
    sent = int(report["deliveries"]) - int(report["executed"])
    check(duplicates + in_progress == sent and sent > 0,
          "the load sent %d duplicate deliveries (%d met COMPLETED, %d IN_PROGRESS)"
          % (sent, duplicates, in_progress))
    # Two scrapes after the load, every counter is in.
    time.sleep(2 * SCRAPE_SECONDS + 1)
    got = {s["metric"].get("kind"): float(s["value"][1]) for s in prom.query(
        'sum by (kind) (dedup_duplicates_intercepted_total{namespace="%s"})' % NAMESPACE)}
    check(got.get("completed") == duplicates and got.get("in_progress", 0.0) == in_progress,
          "dedup_duplicates_intercepted_total equals the duplicates the load sent: "
          "completed %s == %d, in_progress %s == %d" % (got.get("completed"), duplicates,
                                                       got.get("in_progress", 0.0), in_progress))
    panel = [p for p in dashboard["panels"] if p.get("title") == HEADLINE_PANEL]
    if not check(len(panel) == 1, "the dashboard has the panel '%s'" % HEADLINE_PANEL):
        return
    expr = grafana_substitute(panel[0]["targets"][0]["expr"], {}, SCRAPE_SECONDS)
    # Until the last increment has left the rate's window: one scrape to
    # be seen, the window, and a scrape of margin. The range must not end
    # in the future, where it has no points: that cut off the last
    # increments of a two-second load.
    range_end = load_end + rate_interval(SCRAPE_SECONDS) + 2 * SCRAPE_SECONDS + 1
    time.sleep(max(0.0, range_end + SCRAPE_SECONDS - time.time()))
    series = prom.query_range(expr, load_start - 5, range_end, SCRAPE_SECONDS)
    shown = sum(float(v) * SCRAPE_SECONDS for s in series
                if s["metric"].get("namespace") == NAMESPACE for _, v in s["values"])
    check(abs(shown - sent) <= 0.25 * sent,
          "the headline panel's rate over the load adds up to %.0f duplicates (%d sent, "
          "25%% tolerance)" % (shown, sent))


def rate_interval(step):
    """$__rate_interval as Grafana computes it for a Prometheus source."""
    return max(4 * SCRAPE_SECONDS, step + SCRAPE_SECONDS)


def grafana_substitute(expr, values, step):
    """expr with Grafana's variables replaced: $__rate_interval as Grafana
    computes it for a Prometheus source (max(4 x scrape interval, step +
    scrape interval)), $__interval as the step, and each template variable
    as a regex of its selected values (All: its allValue, .*)."""
    interval = rate_interval(step)
    expr = re.sub(r"\$\{?__rate_interval\}?", "%ds" % interval, expr)
    expr = re.sub(r"\$\{?__interval\}?", "%ds" % step, expr)
    expr = re.sub(r"\$\{?__range\}?", "%ds" % interval, expr)

    def variable(m):
        name = m.group(1) or m.group(2)
        if name not in values:
            return ".*"
        return "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in values[name]) + ")"
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", variable, expr)


def variable_values(prom, dashboard, at):
    """{name: [values]} of the dashboard's query variables, as Grafana lists
    them (label_values(metric, label)); checks each is non-empty."""
    values = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"\s*label_values\(\s*([^,]+?)\s*,\s*(\w+)\s*\)\s*", query)
        if not check(m is not None, "variable %s is label_values(metric, label)" % var["name"],
                     query):
            continue
        found = prom.api("/api/v1/label/%s/values" % m.group(2), **{
            "match[]": grafana_substitute(m.group(1), {}, SCRAPE_SECONDS),
            "start": "%.3f" % (at - 600), "end": "%.3f" % at})
        check(bool(found), "variable %s lists values: %s" % (var["name"], ", ".join(found)))
        values[var["name"]] = sorted(found)
    return values


def step_panels(prom, dashboard, at):
    values = variable_values(prom, dashboard, at)
    selections = [("All", {})]
    if all(values.values()):
        # One value each, as a user picks them: the load's namespace and
        # Claim where listed, else the first.
        preferred = {"namespace": NAMESPACE, "method": "Claim"}
        selections.append(("one value each", {
            k: [preferred[k]] if preferred.get(k) in v else v[:1] for k, v in values.items()}))
    empty_panels = []
    for panel in dashboard["panels"]:
        if panel.get("type") == "row":
            continue
        title = panel.get("title", "")
        for label, selection in selections:
            empty = []
            for target in panel.get("targets", []):
                expr = grafana_substitute(target["expr"], selection, SCRAPE_SECONDS)
                if not prom.query(expr, at=at):
                    empty.append(target.get("refId", "?"))
            if title in EMPTY_BY_DESIGN:
                phrase, reason = EMPTY_BY_DESIGN[title]
                if label == "All":
                    check(phrase in panel.get("description", ""),
                          "panel '%s' may be empty (%s) and says so" % (title, reason),
                          "its description lacks '%s'" % phrase)
                    if empty:
                        empty_panels.append(title)
                continue
            check(not empty, "panel '%s' (%s) returns series" % (title, label),
                  "empty: target(s) %s" % ", ".join(empty))
    if empty_panels:
        note("empty by design now: " + "; ".join(empty_panels))


def step_lost_replica(prom, cluster):
    instance = {"instance": cluster.instance(0)}
    started = time.monotonic()
    code = cluster.stop_node(0)
    check(code == 0, "node 0 exited 0 on SIGTERM", "exit %s" % code)
    await_alerts(prom, started, [("DedupdShardReplicaDown", {}), ("DedupdTargetDown", instance)])
    restarted = time.monotonic()
    cluster.start_node(0)
    await_clear(prom, "DedupdTargetDown", restarted, 60, instance)
    await_clear(prom, "DedupdShardReplicaDown", restarted, 60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dedupd", required=True)
    parser.add_argument("--consumer", required=True, help="client/examples/payment_consumer")
    parser.add_argument("--deploy", required=True, help="the deploy/ directory to check")
    parser.add_argument("--prometheus", default="prometheus")
    args = parser.parse_args()
    for tool in (args.prometheus, "etcd"):
        if not shutil.which(tool):
            print("SKIP: %s is not installed (deploy/install-deps.sh installs it)" % tool)
            return 77
    with open(os.path.join(args.deploy, "grafana", "dedupd-dashboard.json")) as f:
        dashboard = json.load(f)

    # A timeout's SIGTERM (ctest) still stops what was started and unmounts.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("check_prometheus: terminated"))
    begun = time.monotonic()
    work = tempfile.mkdtemp(prefix="dedup-prometheus-")
    procs = Processes()
    cluster = Cluster(args, work, procs)
    unmount = None
    try:
        unmount = mount_small_volume(cluster.data[2], work)
        cluster.start_etcd()
        for i in range(3):
            cluster.start_node(i)
        prom = start_prometheus(args, cluster, work, procs)
        wait_for("three targets up", 30, lambda: len(prom.query('up{job="dedupd"} == 1')) == 3)
        print("cluster %s, Prometheus %s, ready after %.0fs"
              % (cluster.endpoint, prom.base, time.monotonic() - begun), flush=True)

        if unmount:
            step_volume(prom, cluster, cluster.data[2])
        else:
            note("not root or no loop device: the volume alert is not checked")
        report, load_start, load_end = run_load(args, cluster)
        step_counters(prom, report, dashboard, load_start, load_end)
        # Three scrapes after the load: a series the load's last call
        # created has two samples in the panels' rate window by then, and
        # one its first call created is still in it.
        step_panels(prom, dashboard, load_end + 3 * SCRAPE_SECONDS)
        step_lost_replica(prom, cluster)
    except Fatal as e:
        check(False, "the check ran to the end", str(e))
        for name in ("node-0", "node-1", "node-2", "prometheus"):
            print("--- %s log:\n%s" % (name, log_tail(os.path.join(work, name + ".log"), 8)))
    finally:
        procs.stop_all()
        if unmount:
            unmount()
        shutil.rmtree(work, ignore_errors=True)
    print("check_prometheus: %d failed, in %.0fs" % (len(failures), time.monotonic() - begun))
    for f in failures:
        print("  failed: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
