{{/* Names. */}}
{{- define "dedupd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The StatefulSet's name, and so the pods' prefix. Kept to 52 characters so
that "<fullname>-headless" and the pods' hostnames fit DNS labels.
*/}}
{{- define "dedupd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The headless Service that gives every pod a stable DNS name. */}}
{{- define "dedupd.headlessName" -}}
{{- printf "%s-headless" (include "dedupd.fullname" .) -}}
{{- end -}}

{{- define "dedupd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dedupd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dedupd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dedupd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dedupd.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The number of nodes: replicaCount, or the deprecated `replicas` when it is
set (NOTES.txt then says it is deprecated).
*/}}
{{- define "dedupd.replicaCount" -}}
{{- if kindIs "invalid" .Values.replicas -}}
{{- int .Values.replicaCount -}}
{{- else -}}
{{- int .Values.replicas -}}
{{- end -}}
{{- end -}}

{{/*
Address of every node as clients reach it, in node-index order:
<fullname>-<i>.<headless>.<namespace>.svc.<clusterDomain>:7400.
*/}}
{{- define "dedupd.clusterNodes" -}}
{{- $addresses := list -}}
{{- $fullname := include "dedupd.fullname" . -}}
{{- $headless := include "dedupd.headlessName" . -}}
{{- range $i := until (include "dedupd.replicaCount" . | int) -}}
{{- $addresses = append $addresses (printf "%s-%d%s" $fullname $i (include "dedupd.nodeAddressSuffix" $)) -}}
{{- end -}}
{{- join "," $addresses -}}
{{- end -}}

{{/*
What follows "<fullname>-<i>" in node i's address:
".<headless>.<namespace>.svc.<clusterDomain>:7400".
*/}}
{{- define "dedupd.nodeAddressSuffix" -}}
{{- printf ".%s.%s.svc.%s:7400" (include "dedupd.headlessName" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* One NamespacePolicy's fields in protobuf text format (only those set). */}}
{{- define "dedupd.policyFields" -}}
{{- with .leaseDefault }}
lease_default: {{ . | quote }}
{{- end }}
{{- with .leaseMax }}
lease_max: {{ . | quote }}
{{- end }}
{{- with .retentionDefault }}
retention_default: {{ . | quote }}
{{- end }}
{{- with .retentionFloor }}
retention_floor: {{ . | quote }}
{{- end }}
{{- with .maxResultBytes }}
max_result_bytes: {{ int64 . }}
{{- end }}
{{- with .maxAttempts }}
max_attempts: {{ int64 . }}
{{- end }}
{{- end -}}

{{/*
The configuration file (proto/dedup/v1/server_config.proto). listen,
metrics_listen, data_dir and the cluster are command-line flags of the
StatefulSet, since they differ per pod or name the Services' ports.
*/}}
{{- define "dedupd.configText" -}}
# dedupd configuration rendered by the {{ .Chart.Name }} chart {{ .Chart.Version }}.
# Schema and defaults: proto/dedup/v1/server_config.proto. listen,
# metrics_listen, data_dir, cluster_nodes and node_index are flags.
shards: {{ include "dedupd.shards" . }}
durability: {{ .Values.durability | quote }}
strict_namespaces: {{ .Values.strictNamespaces }}
{{- with .Values.server }}
{{- with .bufferedSyncInterval }}
buffered_sync_interval: {{ . | quote }}
{{- end }}
{{- with .maxKeyBytes }}
max_key_bytes: {{ int64 . }}
{{- end }}
{{- with .workers }}
workers: {{ int64 . }}
{{- end }}
{{- with .execution }}
execution: {{ . | quote }}
{{- end }}
{{- with .abandonedGrace }}
abandoned_grace: {{ . | quote }}
{{- end }}
{{- with .periodicCompaction }}
periodic_compaction: {{ . | quote }}
{{- end }}
{{- with .shutdownGrace }}
shutdown_grace: {{ . | quote }}
{{- end }}
{{- with .maxNamespaceLabels }}
max_namespace_labels: {{ int64 . }}
{{- end }}
{{- with .statsInterval }}
stats_interval: {{ . | quote }}
{{- end }}
{{- end }}
{{- with .Values.defaultPolicy }}

default_policy {
{{- include "dedupd.policyFields" . | trim | nindent 2 }}
}
{{- end }}
{{- range .Values.namespaces }}

namespaces {
  name: {{ .name | quote }}
  {{- with .policy }}
  policy {
{{- include "dedupd.policyFields" . | trim | nindent 4 }}
  }
  {{- end }}
}
{{- end }}
{{- if and .Values.auth.tokensSecret (not .Values.tls.enabled) }}
{{- fail "auth.tokensSecret: bearer tokens need tls.enabled; over plaintext anyone on the network path can read and replay them" }}
{{- end }}
{{- if and .Values.auth.tokensSecret (not .Values.auth.grants) }}
{{- fail "auth.tokensSecret: set without auth.grants; grants decide what an identity may do" }}
{{- end }}
{{- if .Values.auth.grants }}

auth {
  {{- if .Values.auth.tokensSecret }}
  tokens_file: "/etc/dedupd-auth/tokens"
  {{- end }}
  {{- range .Values.auth.grants }}
  grants {
    identity: {{ .identity | quote }}
    {{- range .namespaces }}
    namespaces: {{ . | quote }}
    {{- end }}
    {{- range .roles }}
    roles: {{ . | quote }}
    {{- end }}
  }
  {{- end }}
  {{- if eq (include "dedupd.replicaGrantIssued" .) "true" }}
  # The nodes' own server certificate, issued by the chart: replicated
  # nodes call each other's Replication service with it{{ if eq (include "dedupd.clusterJobsUseNodeCertificate" .) "true" }}, and the
  # cluster Jobs move shard replicas with it (cluster){{ end }}.
  grants {
    identity: {{ include "dedupd.nodeIdentity" . | quote }}
    namespaces: "*"
    roles: "replica"
    {{- if eq (include "dedupd.clusterJobsUseNodeCertificate" .) "true" }}
    roles: "cluster"
    {{- end }}
  }
  {{- end }}
  {{- if eq (include "dedupd.helmTestIssued" .) "true" }}
  # The helm test pod's certificate, issued by the chart.
  grants {
    identity: {{ include "dedupd.helmTestIdentity" . | quote }}
    namespaces: {{ .Values.helmTest.namespace | quote }}
    roles: "claim"
  }
  {{- end }}
}
{{- end }}
{{- if eq (include "dedupd.replicated" .) "true" }}

# Replicated shards (docs/replication.md): nodes and node_index are flags.
cluster {
  replication_factor: {{ int .Values.replicationFactor }}
  {{- range splitList "," (include "dedupd.etcdEndpoints" .) }}
  etcd_endpoints: {{ . | quote }}
  {{- end }}
  name: {{ include "dedupd.clusterName" . | quote }}
  {{- with .Values.leaderLease }}
  leader_lease: {{ . | quote }}
  {{- end }}
}
{{- end }}
{{- with .Values.server.extraConfig }}

{{ . }}
{{- end }}
{{- end -}}

{{/*
The Secret with the server's tls.crt, tls.key and ca.crt.
*/}}
{{- define "dedupd.tlsSecretName" -}}
{{- if .Values.tls.certManager.enabled -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "dedupd.fullname" .)) -}}
{{- else -}}
{{- required "tls.secretName: the Secret with tls.crt, tls.key and ca.crt (or tls.certManager.enabled)" .Values.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the chart issues the helm test pod's client certificate.
*/}}
{{- define "dedupd.helmTestIssued" -}}
{{- and .Values.helmTest.enabled .Values.tls.enabled .Values.tls.certManager.enabled (not .Values.helmTest.tlsSecretName) -}}
{{- end -}}

{{- define "dedupd.helmTestIdentity" -}}
spiffe://{{ .Release.Namespace }}/{{ include "dedupd.fullname" . }}-helm-test
{{- end -}}

{{/*
The Secret with the helm test pod's client certificate, when TLS is on.
*/}}
{{- define "dedupd.helmTestTlsSecretName" -}}
{{- if eq (include "dedupd.helmTestIssued" .) "true" -}}
{{- printf "%s-helm-test-tls" (include "dedupd.fullname" .) -}}
{{- else -}}
{{- required "helmTest.tlsSecretName: with tls.enabled the helm test pod needs a client certificate (a Secret with tls.crt, tls.key and ca.crt), or set tls.certManager.enabled, or helmTest.enabled=false" .Values.helmTest.tlsSecretName -}}
{{- end -}}
{{- end -}}

{{/*
The cluster's logical shards: `shards` when set; unset (0), the installed
release's count on an upgrade (16 for a release from before the chart
recorded it, the default then), and 1024 for a new release (docs/elastic.md
§1: enough to spread over hundreds of nodes, at the idle cost measured
there).
*/}}
{{- define "dedupd.shards" -}}
{{- if .Values.shards -}}
{{- int .Values.shards -}}
{{- else -}}
{{- $existing := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "dedupd.fullname" .) -}}
{{- if $existing -}}
{{- get ($existing.metadata.annotations | default dict) "dedupd/shards" | default "16" -}}
{{- else -}}
1024
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Refuses, on `helm upgrade`, a change of shards or replicationFactor of a
cluster whose pods already hold data, or of replicaCount when it is
unreplicated: the data directories would refuse the new shape, or hold the
wrong shards. A replicated cluster changes its node count online (the
cluster Jobs move the replicas). `lookup` finds nothing under `helm
template` or on a first install.
*/}}
{{- define "dedupd.checkClusterShape" -}}
{{- if not .Values.allowClusterReshape -}}
{{- $existing := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "dedupd.fullname" .) -}}
{{- if $existing -}}
{{- $annotations := $existing.metadata.annotations | default dict -}}
{{- $nodes := get $annotations "dedupd/cluster-nodes" -}}
{{- $shards := get $annotations "dedupd/shards" -}}
{{- $factor := get $annotations "dedupd/replication-factor" -}}
{{- if and $nodes (not $factor) -}}
{{- /* Charts before replication recorded no factor: their clusters have one copy. */ -}}
{{- $factor = "1" -}}
{{- end -}}
{{- $count := include "dedupd.replicaCount" . | int -}}
{{- if and $nodes (eq $factor "1") (ne $nodes (toString $count)) -}}
{{- fail (printf "replicaCount: the installed cluster has %s nodes and this upgrade asks for %d. With replicationFactor 1 node i owns the shards s with s mod n == i, so shards would move between nodes while their data stays, and every pod would refuse its data directory. Only a replicated cluster (replicationFactor 2 or more) changes its node count in place; deploy a new release with the new size instead (see the chart's README), or set allowClusterReshape=true if the volumes were deleted on purpose." $nodes $count) -}}
{{- end -}}
{{- if and $shards (ne $shards (include "dedupd.shards" .)) -}}
{{- fail (printf "shards: the installed cluster has %s shards and this upgrade asks for %s; the data directories would refuse it. Leave shards unset (0) to keep the installed count, deploy a new release instead, or set allowClusterReshape=true if the volumes were deleted on purpose." $shards (include "dedupd.shards" .)) -}}
{{- end -}}
{{- if and $factor (ne $factor (toString (int .Values.replicationFactor))) -}}
{{- fail (printf "replicationFactor: the installed cluster has replication factor %s and this upgrade asks for %d. The factor decides which pods hold which shards and whether leaders live in etcd, and the chart does not convert an installed cluster between factors. Set replicationFactor=%s to keep this release as it is (a release installed before the chart knew replication has factor 1), or deploy a new release (see the chart's README); allowClusterReshape=true skips this check if the volumes were deleted on purpose." $factor (int .Values.replicationFactor) $factor) -}}
{{- end -}}
{{- end -}}
{{- $etcd := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "dedupd.etcdName" .) -}}
{{- if $etcd -}}
{{- if ne (include "dedupd.etcdDeployed" .) "true" -}}
{{- fail (printf "etcd: the installed release runs its own etcd (StatefulSet %s), which holds the cluster's members, leaders and epochs, and this upgrade would delete it. Keep etcd.deploy and etcd.endpoints as they were: the chart does not move a running cluster to another etcd (allowClusterReshape=true skips this check)." $etcd.metadata.name) -}}
{{- end -}}
{{- if ne (int $etcd.spec.replicas) (int .Values.etcd.members) -}}
{{- fail (printf "etcd.members: the installed etcd has %d members and this upgrade asks for %d. The chart's etcd is a static cluster: its members are listed when it first starts, and a new one cannot join without `etcdctl member add`. Keep etcd.members=%d, or set allowClusterReshape=true after changing the membership by hand." (int $etcd.spec.replicas) (int .Values.etcd.members) (int $etcd.spec.replicas)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Replication (docs/replication.md). "true" when shards have more than one
copy and leadership lives in etcd.
*/}}
{{- define "dedupd.replicated" -}}
{{- if gt (int .Values.replicationFactor) 1 -}}true{{- end -}}
{{- end -}}

{{/*
"true" when the chart deploys its own etcd: etcd.deploy, or, left null, a
replicated cluster given no etcd.endpoints.
*/}}
{{- define "dedupd.etcdDeployed" -}}
{{- if eq (include "dedupd.replicated" .) "true" -}}
{{- if kindIs "bool" .Values.etcd.deploy -}}
{{- if .Values.etcd.deploy -}}true{{- end -}}
{{- else if not .Values.etcd.endpoints -}}true
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The chart's etcd: its StatefulSet and its headless Service share this name
(at most 57 characters, so that it fits a DNS label as a Service name).
*/}}
{{- define "dedupd.etcdName" -}}
{{- printf "%s-etcd" (include "dedupd.fullname" .) -}}
{{- end -}}

{{- define "dedupd.etcdSelectorLabels" -}}
app.kubernetes.io/name: {{ include "dedupd.name" . }}-etcd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end -}}

{{/*
Peer URL of every member of the chart's etcd, "name=url,...", as etcd's
initial-cluster wants it: the members are the StatefulSet's pods.
*/}}
{{- define "dedupd.etcdInitialCluster" -}}
{{- $name := include "dedupd.etcdName" . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.etcd.members) -}}
{{- $members = append $members (printf "%s-%d=http://%s-%d.%s.%s.svc.%s:2380" $name $i $name $i $name $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/*
The etcd client endpoints dedupd is given, comma-separated: etcd.endpoints,
or every member of the chart's etcd by its pod DNS name.
*/}}
{{- define "dedupd.etcdEndpoints" -}}
{{- if eq (include "dedupd.etcdDeployed" .) "true" -}}
{{- $name := include "dedupd.etcdName" . -}}
{{- $endpoints := list -}}
{{- range $i := until (int .Values.etcd.members) -}}
{{- $endpoints = append $endpoints (printf "%s-%d.%s.%s.svc.%s:2379" $name $i $name $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $endpoints -}}
{{- else -}}
{{- join "," .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{- define "dedupd.clusterName" -}}
{{- .Values.clusterName | default .Release.Name -}}
{{- end -}}

{{/*
The identity of the server certificate the chart has cert-manager issue:
its URI subject alternative name (dedupd takes a certificate's first URI
SAN, else its first DNS SAN). Replicated nodes call each other with it.
*/}}
{{- define "dedupd.nodeIdentity" -}}
spiffe://{{ .Release.Namespace }}/{{ include "dedupd.fullname" . }}
{{- end -}}

{{/*
"true" when the chart grants the nodes' own certificate the replica role:
grants are set (otherwise every caller may call the Replication service),
the cluster is replicated, and the chart issues that certificate. It also
grants cluster when the cluster Jobs present that certificate.
*/}}
{{- define "dedupd.replicaGrantIssued" -}}
{{- if and .Values.auth.grants (eq (include "dedupd.replicated" .) "true") .Values.tls.enabled .Values.tls.certManager.enabled -}}true{{- end -}}
{{- end -}}

{{/*
A duration as dedupd writes them ("10s", "1m30s", "500ms", "0") in seconds,
as a decimal; "inf" fails, since no grace period can be computed from it.
*/}}
{{- define "dedupd.seconds" -}}
{{- $text := .value | toString -}}
{{- if eq $text "inf" -}}
{{- fail (printf "%s: \"inf\" leaves terminationGracePeriodSeconds nothing to be computed from; give a finite duration or set terminationGracePeriodSeconds" .field) -}}
{{- end -}}
{{- $scale := dict "ns" 0.000000001 "us" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range $part := regexFindAll "[0-9]+(\\.[0-9]*)?(ns|us|ms|s|m|h)" $text -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]*)?" $part -}}
{{- $unit := trimPrefix $number $part -}}
{{- $total = addf $total (mulf (float64 $number) (get $scale $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
What SIGTERM may take, in seconds: the preStop wait, then (replicated) the
handoff of the shards this node leads, which dedupd bounds at
min(shutdown_grace/2, 5s), then the drain of in-flight calls, up to
shutdown_grace.
*/}}
{{- define "dedupd.stopSeconds" -}}
{{- $grace := 10.0 -}}
{{- with .Values.server.shutdownGrace -}}
{{- $grace = include "dedupd.seconds" (dict "value" . "field" "server.shutdownGrace") | float64 -}}
{{- end -}}
{{- $handoff := 0.0 -}}
{{- if eq (include "dedupd.replicated" .) "true" -}}
{{- $handoff = minf 5.0 (divf $grace 2.0) -}}
{{- end -}}
{{- addf (float64 (int .Values.preStopSleepSeconds)) $handoff $grace | ceil | int -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: the value set, which must cover what SIGTERM
may take, or that plus 10s to sync the WAL and close RocksDB.
*/}}
{{- define "dedupd.terminationGracePeriodSeconds" -}}
{{- $set := .Values.terminationGracePeriodSeconds -}}
{{- if and (not (kindIs "invalid" $set)) (eq (toString .Values.server.shutdownGrace) "inf") -}}
{{- int $set -}}
{{- else -}}
{{- $needed := include "dedupd.stopSeconds" . | int -}}
{{- if kindIs "invalid" $set -}}
{{- add $needed 10 -}}
{{- else if lt (int $set) $needed -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) is shorter than what stopping may take, %ds: preStopSleepSeconds, %sand server.shutdownGrace for in-flight calls. Kubernetes would kill dedupd before it syncs its WAL. Leave it empty to have it computed, or raise it." (int $set) $needed (ternary "the handoff of the shards the node leads (min(shutdownGrace/2, 5s)), " "" (eq (include "dedupd.replicated" .) "true"))) -}}
{{- else -}}
{{- int $set -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Refuses a node count the cluster cannot run with, and values a replicated
cluster cannot run with, each with what to do.
*/}}
{{- define "dedupd.checkReplication" -}}
{{- $r := int .Values.replicationFactor -}}
{{- $n := include "dedupd.replicaCount" . | int -}}
{{- if le $r 1 -}}
{{- if gt $n (include "dedupd.shards" . | int) -}}
{{- fail (printf "replicaCount (%d) must not exceed shards (%d): unreplicated, node i owns the shards s with s mod replicaCount == i, so some nodes would own none" $n (include "dedupd.shards" . | int)) -}}
{{- end -}}
{{- if .Values.etcd.endpoints -}}
{{- fail "etcd.endpoints: set with replicationFactor 1; only a replicated cluster uses etcd (dedupd refuses etcd endpoints without replication). Set replicationFactor above 1, or remove etcd.endpoints" -}}
{{- end -}}
{{- if eq (toString .Values.etcd.deploy) "true" -}}
{{- fail "etcd.deploy: true with replicationFactor 1; an unreplicated cluster does not use etcd. Set replicationFactor above 1, or leave etcd.deploy empty" -}}
{{- end -}}
{{- else -}}
{{- if lt $n $r -}}
{{- fail (printf "replicaCount (%d) must be at least replicationFactor (%d): every shard keeps %d copies, each on a different pod. Raise replicaCount, or lower replicationFactor (1: unreplicated, no etcd)" $n $r $r) -}}
{{- end -}}
{{- if and .Values.etcd.endpoints (eq (toString .Values.etcd.deploy) "true") -}}
{{- fail "etcd: both etcd.endpoints and etcd.deploy=true; use an existing etcd (endpoints) or have the chart deploy one, not both" -}}
{{- end -}}
{{- if and (not .Values.etcd.endpoints) (eq (toString .Values.etcd.deploy) "false") -}}
{{- fail (printf "etcd: replicationFactor %d keeps the shards' leaders in etcd, and etcd.deploy=false with no etcd.endpoints gives none. Set etcd.endpoints to an existing etcd (host:port), or leave etcd.deploy empty to deploy one with the release" $r) -}}
{{- end -}}
{{- if .Values.auth.grants -}}
{{- if not .Values.tls.enabled -}}
{{- fail (printf "auth.grants with replicationFactor %d need tls.enabled: the nodes call each other's Replication service and are authorized by their TLS certificates; over plaintext they have no identity, so every replication call would be denied. Enable tls (with tls.certManager the chart grants the nodes' certificate the replica role itself), or remove auth.grants" $r) -}}
{{- end -}}
{{- if not .Values.tls.certManager.enabled -}}
{{- $granted := false -}}
{{- range .Values.auth.grants -}}
{{- if and (has "replica" .roles) (has "*" .namespaces) -}}
{{- $granted = true -}}
{{- end -}}
{{- end -}}
{{- if not $granted -}}
{{- fail (printf "auth.grants: replicationFactor %d with grants and the certificate of tls.secretName: the nodes call each other's Replication service with that certificate, and its identity needs a grant {identity: <its first URI SAN, else its first DNS SAN>, namespaces: [\"*\"], roles: [replica]}, which the chart cannot know. Add that grant (and make sure the certificate may be used for client auth), or use tls.certManager, for which the chart adds it" $r) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.clusterJobs.enabled (or .Values.clusterJobs.tlsSecretName (not .Values.tls.certManager.enabled)) -}}
{{- $mover := false -}}
{{- range .Values.auth.grants -}}
{{- if and (or (has "cluster" .roles) (has "admin" .roles)) (has "*" .namespaces) -}}
{{- $mover = true -}}
{{- end -}}
{{- end -}}
{{- if not $mover -}}
{{- fail (printf "auth.grants: the cluster Jobs (clusterJobs) move shard replicas with `dedupctl cluster rebalance` and `remove-node`, which need the cluster role (or admin) on \"*\", presenting the certificate of %s. Add a grant {identity: <its first URI SAN, else its first DNS SAN>, namespaces: [\"*\"], roles: [cluster]}, or set clusterJobs.enabled=false and move replicas by hand" (ternary "clusterJobs.tlsSecretName" "tls.secretName (the nodes' own)" (not (empty .Values.clusterJobs.tlsSecretName)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
