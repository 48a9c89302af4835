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
Address of every node as clients reach it, in node-index order:
<fullname>-<i>.<headless>.<namespace>.svc.<clusterDomain>:7400.
*/}}
{{- define "dedupd.clusterNodes" -}}
{{- $addresses := list -}}
{{- $fullname := include "dedupd.fullname" . -}}
{{- $headless := include "dedupd.headlessName" . -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $addresses = append $addresses (printf "%s-%d.%s.%s.svc.%s:7400" $fullname $i $headless $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $addresses -}}
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
shards: {{ int64 .Values.shards }}
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
Refuses, on `helm upgrade`, a change of replicas or shards of a cluster
whose pods already hold data: the data directories would refuse the new
shape. `lookup` finds nothing under `helm template` or on a first install.
*/}}
{{- define "dedupd.checkClusterShape" -}}
{{- if not .Values.allowClusterReshape -}}
{{- $existing := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "dedupd.fullname" .) -}}
{{- if $existing -}}
{{- $annotations := $existing.metadata.annotations | default dict -}}
{{- $nodes := get $annotations "dedupd/cluster-nodes" -}}
{{- $shards := get $annotations "dedupd/shards" -}}
{{- if and $nodes (ne $nodes (toString (int .Values.replicas))) -}}
{{- fail (printf "replicas: the installed cluster has %s nodes and this upgrade asks for %d. Shards would move between nodes while their data stays, and every pod would refuse its data directory. Deploy a new release with the new size instead (see the chart's README), or set allowClusterReshape=true if the volumes were deleted on purpose." $nodes (int .Values.replicas)) -}}
{{- end -}}
{{- if and $shards (ne $shards (toString (int .Values.shards))) -}}
{{- fail (printf "shards: the installed cluster has %s shards and this upgrade asks for %d; the data directories would refuse it. Deploy a new release instead, or set allowClusterReshape=true if the volumes were deleted on purpose." $shards (int .Values.shards)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
