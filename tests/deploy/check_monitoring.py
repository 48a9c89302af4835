#!/usr/bin/python3
"""Checks the monitoring artifacts in deploy/ against the dedupd binary.

    check_monitoring.py --dedupd build/server/dedupd --deploy deploy

1. Starts the dedupd binary on loopback (gRPC on port 0, /metrics on a free
   port), makes one RPC so that lazily created series exist, waits for the
   first storage refresh, and reads /metrics: the metric names dedupd exports
   come from its `# TYPE` lines (a histogram is name_bucket, name_sum and
   name_count), their label names and values from the samples. /healthz and
   /readyz must answer 200, and SIGTERM must end the process with exit 0.
   The replication metrics (dedup_replication_*) exist only on a
   replicated node: with etcd on PATH (Debian package etcd-server), a
   one-member etcd and two dedupd nodes with replication_factor 2 are
   started on loopback, and both nodes' /metrics are read once each leads a
   shard; without etcd, expressions on dedup_replication_* are not checked
   against the binary, with a note.
2. Every PromQL expression in deploy/grafana/dedupd-dashboard.json (panel
   targets and template variable queries) and deploy/prometheus/dedupd-alerts.yaml
   may use only those metrics (plus Prometheus' `up` and blackbox_exporter's
   `probe_success`), only labels those metrics carry (plus the target labels
   job and instance), only values dedupd produces for enumerated labels
   (outcome, kind, state, reason, method, code), and only known PromQL
   functions.
3. The rules file is checked for shape in Python (groups with a name; each
   alert with expr, a valid `for`, labels.severity, annotations.summary and
   .description) and must alert on the failures operators need to know about.
   With promtool on PATH (Debian package `prometheus`) it also runs
   `promtool check rules` on the rules and on the dashboard's queries,
   `promtool check config` on scrape-config.yaml and `promtool test rules` on
   dedupd-alerts.test.yaml next to this script; without promtool those are
   skipped, with a note.
4. The dashboard is valid JSON with a ${datasource} variable and a namespace
   variable, and every panel has targets with an expr.

Needs python3-yaml (Debian) to read the rules, and python3-grpcio to make the
one RPC. Exits 0 when everything holds, 1 with a list of problems otherwise.
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
import urllib.request

# Metrics the artifacts may use although dedupd does not export them, with
# the labels they carry.
EXTERNAL_METRICS = {
    "up": {"job", "instance"},  # Prometheus, per scrape target.
    "probe_success": {"job", "instance"},  # blackbox_exporter probing /readyz.
}
# Labels Prometheus adds to every scraped series (scrape-config.yaml may add
# more, e.g. cluster, which expressions here do not rely on).
TARGET_LABELS = {"job", "instance"}
# Labels whose values dedupd fixes; a matcher on them must name real values.
ENUM_LABELS = {"outcome", "kind", "state", "reason", "method"}
GRPC_CODES = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
}
# The failures the rules must alert on, as a metric each must use.
REQUIRED_ALERT_METRICS = {
    "up": "target down",
    "dedup_storage_background_error": "storage background error",
    "dedup_lease_takeovers_total": "lease takeover spike",
    "dedup_request_duration_seconds_bucket": "p99 latency",
    "dedup_storage_bytes": "disk growth",
    "dedup_storage_write_stall_seconds_total": "sustained write stalls",
    "dedup_storage_volume_free_bytes": "the data volume filling",
    "dedup_poisoned_total": "poisoned keys",
    "dedup_ready": "readiness",
    "dedup_replication_without_leader_seconds": "a shard without a leader",
    "dedup_replication_live_replicas": "a shard with fewer live replicas than a majority",
    "dedup_replication_lag_entries": "replication lag",
}
# Exported only by a node of a replicated cluster.
REPLICATION_PREFIX = "dedup_replication_"
# The replication metrics a replicated node must export, with their labels.
REQUIRED_REPLICATION = {
    "dedup_replication_factor": set(),
    "dedup_replication_leader": {"shard"},
    "dedup_replication_epoch": {"shard"},
    "dedup_replication_without_leader_seconds": {"shard"},
    "dedup_replication_live_replicas": {"shard"},
    "dedup_replication_lag_entries": {"shard", "follower"},
    "dedup_replication_learner": {"shard"},
    "dedup_replication_voters": {"shard"},
    "dedup_replication_moving": {"shard"},
    "dedup_replication_ship_calls_total": {"follower"},
    "dedup_replication_shipped_entries_total": {"follower"},
    "dedup_replication_shipped_bytes_total": {"follower"},
    "dedup_replication_shipped_entry_bytes_total": {"follower"},
}
# Series that have samples only while something is under way (a shard
# move), so the check cannot see their labels on an idle node: declared.
STATE_LABELS = {
    "dedup_replication_move_copied_bytes": {"shard", "to"},
}
# What stock dashboards and alerts expect of any exporter, and the
# readiness and capacity series operators alert on: dedupd must export each.
REQUIRED_EXPORTED = {
    "process_cpu_seconds_total", "process_resident_memory_bytes",
    "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
    "process_start_time_seconds", "dedup_ready", "dedup_storage_volume_free_bytes",
    "dedup_storage_volume_total_bytes", "dedup_storage_write_stall_seconds_total",
}
SEVERITIES = {"page", "warning", "info"}

PROMQL_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile",
}
PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "exp", "floor", "histogram_quantile", "holt_winters", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10",
    "log2", "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
    "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar",
    "sgn", "sin", "sinh", "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time",
    "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
}
PROMQL_KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
    "group_right", "inf", "nan", "atan2", "start", "end",
}

STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'
SELECTOR_RE = re.compile(r"([a-zA-Z_:][\w:]*)?\s*\{((?:[^{}\"'`]|" + STRING + r")*)\}")
MATCHER_RE = re.compile(r"([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*(" + STRING + ")")
GROUPING_RE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
TOKEN_RE = re.compile(
    r"(?P<num>0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])*|\.\d+)"
    r"|(?P<ident>[a-zA-Z_:][\w:]*)(?P<call>\s*\()?")
GRAFANA_VAR_RE = re.compile(r"\$\{[^}]*\}|\$\w+")
DURATION_RE = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")

problems = []
# Set when no replicated cluster could be started: dedup_replication_*
# names are then taken on trust.
unchecked_prefixes = set()


def problem(message):
    problems.append(message)
    print("FAIL: " + message, flush=True)


def note(message):
    print("note: " + message, flush=True)


# --------------------------------------------------------------------- dedupd


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    """(status, body) of a GET, or (None, error text) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def parse_exposition(text):
    """{series name: {label: set(values)}} from Prometheus text format.

    Names come from the # TYPE lines (histogram and summary families expand to
    their _bucket/_sum/_count series); labels from the samples of each name.
    """
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) == 4:
                families[parts[2]] = parts[3]
    names = {}
    for family, kind in families.items():
        if kind == "histogram":
            suffixes = ["_bucket", "_sum", "_count"]
        elif kind == "summary":
            suffixes = ["", "_sum", "_count"]
        else:
            suffixes = [""]
        for suffix in suffixes:
            names[family + suffix] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s", line)
        if m is None or m.group(1) not in names:
            continue
        labels = names[m.group(1)]
        for label, value in re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""):
            labels.setdefault(label, set()).add(value)
    for name, declared in STATE_LABELS.items():
        if name in names:
            for label in declared:
                names[name].setdefault(label, set())
    return families, names


def make_one_rpc(grpc_port):
    """One Dedup RPC, so that per-request series (created on first use) exist."""
    try:
        import grpc
    except ImportError:
        problem("python3-grpcio is not installed: cannot make the RPC that creates "
                "dedup_requests_total (deploy/install-deps.sh installs it)")
        return
    channel = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
    try:
        # An empty QueryRequest, sent as raw bytes: answered INVALID_ARGUMENT
        # (no namespace), and counted like any other request.
        call = channel.unary_unary("/dedup.v1.Dedup/Query")
        try:
            call(b"", timeout=10)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                problem("dedupd did not answer a Query on its gRPC port: %s" % e.code())
    finally:
        channel.close()


def read_log_tail(path, lines=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def run_dedupd(binary, tmp, attempt):
    """Starts dedupd; returns (process, metrics port, grpc port, log path) or None
    after reporting why not. Returns "retry" if the metrics port was taken."""
    config = os.path.join(tmp, "dedupd.textproto")
    with open(config, "w") as f:
        # The storage gauges (dedup_records...) appear at the first refresh.
        f.write('stats_interval: "100ms"\n')
    port = free_port()
    port_file = os.path.join(tmp, "port-%d" % attempt)
    log_path = os.path.join(tmp, "dedupd-%d.log" % attempt)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [binary, "--config=" + config, "--listen=127.0.0.1:0", "--port_file=" + port_file,
             "--metrics_listen=127.0.0.1:%d" % port,
             "--data_dir=" + os.path.join(tmp, "data-%d" % attempt), "--durability=buffered"],
            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            if code == 1 and attempt < 3 and "cannot serve HTTP" in read_log_tail(log_path):
                # The free port was taken between our probe and dedupd's bind.
                note("metrics port %d was taken meanwhile; retrying on another" % port)
                return "retry"
            problem("dedupd exited with %d before serving /metrics; log:\n%s"
                    % (code, read_log_tail(log_path)))
            return None
        status, _ = http_get("http://127.0.0.1:%d/metrics" % port, timeout=1)
        grpc_port = None
        if os.path.exists(port_file):
            with open(port_file) as f:
                text = f.read().strip()
            grpc_port = int(text) if text.isdigit() else None
        if status == 200 and grpc_port:
            return proc, port, grpc_port, log_path
        time.sleep(0.1)
    problem("dedupd did not serve /metrics on port %d within 30s; log:\n%s"
            % (port, read_log_tail(log_path)))
    stop(proc, log_path, quiet=True)
    return None


def stop(proc, log_path, quiet=False):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = "killed after 30s"
    if code != 0 and not quiet:
        problem("dedupd did not exit 0 on SIGTERM (exit %s); log:\n%s"
                % (code, read_log_tail(log_path)))


def exported_metrics(binary):
    """{series name: {label: values}} scraped from a real dedupd, or None."""
    tmp = tempfile.mkdtemp(prefix="dedup-monitoring-")
    try:
        started = None
        for attempt in range(1, 4):
            started = run_dedupd(binary, tmp, attempt)
            if started != "retry":
                break
        if not started or started == "retry":
            return None
        proc, port, grpc_port, log_path = started
        try:
            base = "http://127.0.0.1:%d" % port
            for path in ("/healthz", "/readyz"):
                status, body = http_get(base + path)
                if status != 200:
                    problem("%s answered %s (%s), expected 200" % (path, status, body.strip()))
            make_one_rpc(grpc_port)
            # Wait (bounded) for the RPC to be counted and the first storage
            # refresh; on timeout, check what is there.
            deadline = time.monotonic() + 15
            while True:
                status, text = http_get(base + "/metrics")
                if status != 200:
                    problem("/metrics answered %s: %s" % (status, text[:200]))
                    return None
                families, names = parse_exposition(text)
                counted = re.search(
                    r'^dedup_request_duration_seconds_count\{[^}]*method="Query"[^}]*\} [1-9]',
                    text, re.M)
                if (counted and "dedup_records" in families) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if not counted:
                note("the Query RPC did not show in dedup_request_duration_seconds_count")
            if "dedup_records" not in families:
                note("no dedup_records after 15s (storage refresh every 100ms)")
            print("dedupd exports %d metric families (%d series names)"
                  % (len(families), len(names)), flush=True)
        finally:
            stop(proc, log_path)
        return names
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def wait_for_port(port, proc, seconds):
    """True once something accepts on 127.0.0.1:port, False if proc exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


def replicated_metrics(binary):
    """{series name: {label: values}} of two replicated nodes, or None.

    Starts a one-member etcd and two dedupd nodes (replication_factor 2,
    4 shards) on loopback and reads both nodes' /metrics once each has
    elected leaders and knows its follower, so that the leader-only series
    (live replicas, lag) exist. None, with a note, when etcd is missing.
    """
    etcd_binary = shutil.which("etcd")
    if etcd_binary is None:
        note("etcd not found (Debian package etcd-server): no replicated cluster started, so "
             "expressions on dedup_replication_* were not checked against the binary")
        return None
    tmp = tempfile.mkdtemp(prefix="dedup-replication-")
    procs = []
    try:
        client, peer = free_port(), free_port()
        etcd_log = os.path.join(tmp, "etcd.log")
        with open(etcd_log, "w") as log:
            etcd = subprocess.Popen(
                [etcd_binary, "--name", "monitoring", "--data-dir", os.path.join(tmp, "etcd"),
                 "--listen-client-urls", "http://127.0.0.1:%d" % client,
                 "--advertise-client-urls", "http://127.0.0.1:%d" % client,
                 "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                 "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                 "--initial-cluster", "monitoring=http://127.0.0.1:%d" % peer],
                stdout=log, stderr=subprocess.STDOUT)
        procs.append((etcd, etcd_log))
        if not wait_for_port(client, etcd, 15):
            problem("etcd did not listen within 15s; log:\n%s" % read_log_tail(etcd_log))
            return None
        config = os.path.join(tmp, "dedupd.textproto")
        with open(config, "w") as f:
            f.write('shards: 4\nstats_interval: "100ms"\n')
        grpc_ports = [free_port(), free_port()]
        metrics_ports = [free_port(), free_port()]
        nodes = ",".join("127.0.0.1:%d" % p for p in grpc_ports)
        for i in range(2):
            log_path = os.path.join(tmp, "node-%d.log" % i)
            with open(log_path, "w") as log:
                proc = subprocess.Popen(
                    [binary, "--config=" + config, "--listen=127.0.0.1:%d" % grpc_ports[i],
                     "--metrics_listen=127.0.0.1:%d" % metrics_ports[i],
                     "--data_dir=" + os.path.join(tmp, "node-%d" % i), "--durability=buffered",
                     "--cluster_nodes=" + nodes, "--node_index=%d" % i,
                     "--replication_factor=2", "--etcd_endpoints=127.0.0.1:%d" % client,
                     "--cluster_name=monitoring", "--leader_lease=2s"],
                    stdout=log, stderr=subprocess.STDOUT)
            procs.append((proc, log_path))
        deadline = time.monotonic() + 60
        while True:
            merged = {}
            for port in metrics_ports:
                status, text = http_get("http://127.0.0.1:%d/metrics" % port)
                if status != 200:
                    continue
                for name, labels in parse_exposition(text)[1].items():
                    for label, values in labels.items():
                        merged.setdefault(name, {}).setdefault(label, set()).update(values)
                    merged.setdefault(name, {})
            missing = [n for n, labels in REQUIRED_REPLICATION.items()
                       if n not in merged or not labels <= set(merged[n])]
            if not missing or time.monotonic() > deadline:
                break
            for proc, log_path in procs[1:]:
                if proc.poll() is not None:
                    problem("a replicated dedupd node exited with %s; log:\n%s"
                            % (proc.returncode, read_log_tail(log_path)))
                    return None
            time.sleep(0.2)
        for name in missing:
            problem("a replicated node does not export %s with labels %s within 60s; logs:\n%s"
                    % (name, ", ".join(sorted(REQUIRED_REPLICATION[name])) or "none",
                       "\n".join(read_log_tail(log, 10) for _, log in procs[1:])))
        print("replicated nodes export %d dedup_replication_* series names"
              % len([n for n in merged if n.startswith(REPLICATION_PREFIX)]), flush=True)
        return {n: labels for n, labels in merged.items() if n.startswith(REPLICATION_PREFIX)}
    finally:
        # Both nodes stop together (each hands its shards over on SIGTERM),
        # then etcd.
        for proc, _ in reversed(procs[1:]):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log_path in reversed(procs[1:]):
            stop(proc, log_path)
        for proc, log_path in procs[:1]:
            stop(proc, log_path, quiet=True)
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------- PromQL


def analyze(expr):
    """Metric references, grouping labels and problems of one PromQL expression.

    Returns ([(metric or None, [(label, op, value)])], [grouping label], [problem]).
    Not a full parser: enough to find every name an expression reads.
    """
    refs, grouping, issues = [], [], []

    def selector(m):
        name = m.group(1)
        matchers = [(l, op, v[1:-1]) for l, op, v in MATCHER_RE.findall(m.group(2))]
        if name and name.lower() in PROMQL_KEYWORDS:
            # `or {job="x"}`: the name is an operator, the selector has none.
            refs.append((None, matchers))
            return name + " "
        refs.append((name, matchers))
        return " "

    rest = SELECTOR_RE.sub(selector, expr)
    rest = re.sub(STRING, " ", rest)  # label_replace arguments and the like
    rest = re.sub(r"\[[^\]]*\]", " ", rest)  # ranges and subqueries
    for _, labels in GROUPING_RE.findall(rest):
        grouping += [l.strip() for l in labels.split(",") if l.strip()]
    rest = GROUPING_RE.sub(" ", rest)
    rest = GRAFANA_VAR_RE.sub(" 1 ", rest)  # e.g. $__range_s outside a string
    for m in TOKEN_RE.finditer(rest):
        ident = m.group("ident")
        if ident is None:
            continue
        if m.group("call"):
            if ident not in PROMQL_FUNCTIONS and ident not in PROMQL_AGGREGATIONS:
                issues.append("unknown PromQL function %s()" % ident)
        elif ident.lower() not in PROMQL_KEYWORDS:
            refs.append((ident, []))
    for name, matchers in refs:
        if name is None:
            if any(l == "__name__" for l, _, _ in matchers):
                issues.append("selects metrics by __name__, which this check cannot follow")
            else:
                issues.append("a selector without a metric name")
    return refs, grouping, issues


def allowed_values(name, label, exported):
    if label == "code":
        return GRPC_CODES
    if label in ENUM_LABELS and name in exported and label in exported[name]:
        return exported[name][label]
    return None


def check_expr(where, expr, exported, used):
    refs, grouping, issues = analyze(expr)
    for issue in issues:
        problem("%s: %s in: %s" % (where, issue, expr))
    labels_in_expr = set(TARGET_LABELS)
    all_known = True
    unknown = set()
    for name, matchers in refs:
        if name is None or name in unknown:
            continue
        used.add(name)
        if name not in exported and any(name.startswith(p) for p in unchecked_prefixes):
            all_known = False  # Its labels are unknown too.
            continue
        if name in exported:
            known = set(exported[name]) | TARGET_LABELS
        elif name in EXTERNAL_METRICS:
            known = EXTERNAL_METRICS[name]
        else:
            problem("%s: metric %s is not exported by dedupd (expr: %s)" % (where, name, expr))
            all_known = False
            unknown.add(name)
            continue
        labels_in_expr |= known
        for label, op, value in matchers:
            if label not in known:
                problem("%s: %s has no label %r (it has %s)"
                        % (where, name, label, ", ".join(sorted(known))))
                continue
            values = allowed_values(name, label, exported)
            if values is None or "$" in value:
                continue
            if op in ("=", "!="):
                wanted = [value]
            elif re.fullmatch(r"[\w|]+", value):
                wanted = value.split("|")
            else:
                continue  # a real regex: not checked
            for v in wanted:
                if v not in values:
                    problem("%s: %s{%s%s%r}: dedupd never sets %s=%r (values: %s)"
                            % (where, name, label, op, value, label, v,
                               ", ".join(sorted(values))))
    for label in grouping if all_known else []:
        if label not in labels_in_expr:
            problem("%s: groups by %r, a label none of its metrics has (expr: %s)"
                    % (where, label, expr))


# --------------------------------------------------------------------- dashboard


def walk_panels(panels):
    for panel in panels:
        yield panel
        yield from walk_panels(panel.get("panels", []))


def check_dashboard(path, exported, used, promql_out):
    try:
        with open(path) as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        problem("%s: not readable JSON: %s" % (path, e))
        return
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < 36:
        problem("dashboard: schemaVersion %r, expected 36 or later" % dashboard.get("schemaVersion"))
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problem("dashboard: needs a template variable 'datasource' of type datasource, "
                "query prometheus")
    for name, var in variables.items():
        if var.get("type") != "query":
            continue
        query = var.get("query")
        query = query.get("query", "") if isinstance(query, dict) else (query or "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_]\w*)\s*\)\s*", query)
        if not m:
            problem("dashboard: variable %s: expected label_values(metric, label), got %r"
                    % (name, query))
            continue
        where = "dashboard variable %s" % name
        check_expr(where, m.group(1), exported, used)
        metric = re.match(r"\s*([a-zA-Z_:][\w:]*)", m.group(1))
        if metric and metric.group(1) in exported:
            if m.group(2) not in set(exported[metric.group(1)]) | TARGET_LABELS:
                problem("%s: %s has no label %r" % (where, metric.group(1), m.group(2)))
    namespace = variables.get("namespace")
    ns_query = namespace and namespace.get("query")
    ns_query = ns_query.get("query") if isinstance(ns_query, dict) else ns_query
    if not ns_query or re.sub(r"\s", "", ns_query) != "label_values(dedup_claims_total,namespace)":
        problem("dashboard: needs a variable 'namespace' from "
                "label_values(dedup_claims_total, namespace)")

    ids = set()
    count = 0
    for panel in walk_panels(dashboard.get("panels", [])):
        title = "dashboard panel %r" % panel.get("title")
        if panel.get("id") in ids:
            problem("%s: duplicate panel id %r" % (title, panel.get("id")))
        ids.add(panel.get("id"))
        if "gridPos" not in panel:
            problem("%s: no gridPos" % title)
        if panel.get("type") in ("row", "text"):
            continue
        count += 1
        if (panel.get("datasource") or {}).get("uid") != "${datasource}":
            problem("%s: datasource should be the ${datasource} variable" % title)
        targets = panel.get("targets") or []
        if not targets:
            problem("%s: no targets" % title)
        for target in targets:
            expr = target.get("expr")
            where = "%s target %s" % (title, target.get("refId"))
            if not isinstance(expr, str) or not expr.strip():
                problem("%s: no expr" % where)
                continue
            if (target.get("datasource") or {}).get("uid", "${datasource}") != "${datasource}":
                problem("%s: datasource should be the ${datasource} variable" % where)
            check_expr(where, expr, exported, used)
            promql_out.append((panel.get("id"), target.get("refId"), expr))
    print("dashboard: %d panels with queries, %d queries" % (count, len(promql_out)), flush=True)


# --------------------------------------------------------------------- rules


def check_rules(path, exported, used):
    try:
        import yaml
    except ImportError:
        problem("python3-yaml is not installed: cannot read %s" % path)
        return
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        problem("%s: not readable YAML: %s" % (path, e))
        return
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list) or not groups:
        problem("rules: expected a non-empty list under 'groups'")
        return
    alerts, group_names, rule_metrics = set(), set(), set()
    for group in groups:
        gname = group.get("name") if isinstance(group, dict) else None
        if not gname:
            problem("rules: a group without a name")
            continue
        if gname in group_names:
            problem("rules: duplicate group name %s" % gname)
        group_names.add(gname)
        rules = group.get("rules")
        if not isinstance(rules, list) or not rules:
            problem("rules: group %s has no rules" % gname)
            continue
        for rule in rules:
            name = rule.get("alert") or rule.get("record")
            where = "rule %s" % name
            expr = rule.get("expr")
            if not name:
                problem("rules: group %s has a rule without alert or record" % gname)
            if not isinstance(expr, str) or not expr.strip():
                problem("%s: no expr" % where)
            else:
                rule_used = set()
                check_expr(where, expr, exported, rule_used)
                used |= rule_used
                if "alert" in rule:
                    rule_metrics |= rule_used
            if "record" in rule:
                continue
            if name in alerts:
                problem("rules: duplicate alert %s" % name)
            alerts.add(name)
            duration = rule.get("for")
            if not isinstance(duration, str) or not duration or not DURATION_RE.match(duration):
                problem("%s: 'for' must be a duration such as 10m (got %r)" % (where, duration))
            severity = (rule.get("labels") or {}).get("severity")
            if severity not in SEVERITIES:
                problem("%s: labels.severity must be one of %s (got %r)"
                        % (where, ", ".join(sorted(SEVERITIES)), severity))
            annotations = rule.get("annotations") or {}
            for key in ("summary", "description"):
                if not isinstance(annotations.get(key), str) or not annotations[key].strip():
                    problem("%s: annotations.%s is missing" % (where, key))
    for metric, what in sorted(REQUIRED_ALERT_METRICS.items()):
        if metric not in rule_metrics:
            problem("rules: no alert on %s (no alert uses %s)" % (what, metric))
    print("rules: %d groups, %d alerts" % (len(group_names), len(alerts)), flush=True)


def check_scrape_config(path):
    try:
        import yaml
    except ImportError:
        return  # Reported by check_rules.
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        problem("%s: not readable YAML: %s" % (path, e))
        return
    jobs = [j for j in (doc or {}).get("scrape_configs") or []
            if str(j.get("job_name", "")).startswith("dedupd")]
    if not jobs:
        problem("scrape-config: no scrape job named dedupd* (the alerts select job=~\"dedupd.*\")")
    for job in jobs:
        if job.get("metrics_path", "/metrics") != "/metrics":
            problem("scrape-config: job %s scrapes %s, dedupd serves /metrics"
                    % (job["job_name"], job["metrics_path"]))


# --------------------------------------------------------------------- promtool


def promtool(args, cwd=None):
    result = subprocess.run(["promtool"] + args, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=120)
    if result.returncode != 0:
        problem("promtool %s failed:\n%s" % (" ".join(args), result.stdout))
    else:
        print("promtool %s: ok" % " ".join(args), flush=True)


def grafana_to_promql(expr):
    """A dashboard query as plain PromQL: Grafana's variables replaced."""
    expr = re.sub(r"\$\{?__(rate_interval|interval|range)\}?", "5m", expr)
    expr = re.sub(r"\$\{?__(range_s|range_ms|interval_ms)\}?", "300", expr)
    return GRAFANA_VAR_RE.sub(".*", expr)


def run_promtool(deploy, dashboard_queries):
    if shutil.which("promtool") is None:
        note("promtool not found (Debian package prometheus): rules, dashboard queries and "
             "scrape config were checked in Python only, and the alert unit tests were skipped")
        return
    prom = os.path.join(deploy, "prometheus")
    promtool(["check", "rules", "dedupd-alerts.yaml"], cwd=prom)
    promtool(["check", "config", "scrape-config.yaml"], cwd=prom)
    tmp = tempfile.mkdtemp(prefix="dedup-promtool-")
    try:
        # The dashboard's queries as recording rules, for promtool's parser.
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": "dashboard:panel%s_%s" % (pid, ref), "expr": grafana_to_promql(expr)}
            for pid, ref, expr in dashboard_queries]}]}
        with open(os.path.join(tmp, "dashboard-queries.yaml"), "w") as f:
            json.dump(rules, f, indent=1)  # JSON is YAML.
        promtool(["check", "rules", "dashboard-queries.yaml"], cwd=tmp)
        tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dedupd-alerts.test.yaml")
        try:
            import yaml
        except ImportError:
            return  # Reported by check_rules.
        # The alert unit tests, on the rules without their annotations: the
        # tests pin when alerts fire and their labels, not their wording.
        with open(os.path.join(prom, "dedupd-alerts.yaml")) as f:
            doc = yaml.safe_load(f)
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                rule.pop("annotations", None)
        with open(os.path.join(tmp, "dedupd-alerts.yaml"), "w") as f:
            yaml.safe_dump(doc, f)
        shutil.copy(tests, tmp)
        promtool(["test", "rules", "dedupd-alerts.test.yaml"], cwd=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dedupd", required=True, help="the dedupd binary")
    parser.add_argument("--deploy", required=True, help="the deploy/ directory")
    args = parser.parse_args()

    if not os.access(args.dedupd, os.X_OK):
        print("FAILED: --dedupd %s is not an executable file" % args.dedupd, flush=True)
        return 1
    exported = exported_metrics(os.path.abspath(args.dedupd))
    if exported is None:
        print("FAILED: could not read dedupd's metrics", flush=True)
        return 1
    for name in sorted(REQUIRED_EXPORTED - set(exported)):
        problem("dedupd does not export %s" % name)
    if "namespace" not in exported.get("dedup_request_duration_seconds_bucket", {}):
        problem("dedup_request_duration_seconds has no namespace label")
    replication = replicated_metrics(os.path.abspath(args.dedupd))
    if replication is None:
        unchecked_prefixes.add(REPLICATION_PREFIX)
    else:
        exported.update(replication)
    used, dashboard_queries = set(), []
    check_dashboard(os.path.join(args.deploy, "grafana", "dedupd-dashboard.json"),
                    exported, used, dashboard_queries)
    check_rules(os.path.join(args.deploy, "prometheus", "dedupd-alerts.yaml"), exported, used)
    check_scrape_config(os.path.join(args.deploy, "prometheus", "scrape-config.yaml"))
    run_promtool(args.deploy, dashboard_queries)

    unused = sorted(n for n in exported if n not in used and not n.endswith(("_sum", "_count"))
                    and n.startswith("dedup_"))
    if unused:
        note("exported but shown nowhere: " + ", ".join(unused))
    if problems:
        print("FAILED: %d problem(s)" % len(problems), flush=True)
        return 1
    print("OK: every query uses only what dedupd exports", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
