{{/*
Where each pod's zone comes from (values: zone): zone.source when the
cluster is replicated, "none" otherwise (an unreplicated cluster places no
replicas).
*/}}
{{- define "dedupd.zoneSource" -}}
{{- if eq (include "dedupd.replicated" .) "true" -}}
{{- .Values.zone.source -}}
{{- else -}}
none
{{- end -}}
{{- end -}}

{{/*
"true" when an init container reads the zone from the Kubernetes node's
label, with the ServiceAccount, ClusterRole and ClusterRoleBinding that let
it.
*/}}
{{- define "dedupd.zoneLookup" -}}
{{- if eq (include "dedupd.zoneSource" .) "node" -}}true{{- end -}}
{{- end -}}

{{/* The ServiceAccount of the pods when the zone lookup runs. */}}
{{- define "dedupd.zoneLookupServiceAccount" -}}
{{- include "dedupd.fullname" . -}}
{{- end -}}

{{/*
The ClusterRole and ClusterRoleBinding of the zone lookup. They are not
namespaced, so their name carries the release's namespace.
*/}}
{{- define "dedupd.zoneLookupClusterRole" -}}
{{- printf "%s-%s-zone-lookup" .Release.Namespace (include "dedupd.fullname" .) -}}
{{- end -}}

{{/* Where the zone lookup writes the zone, and the entrypoint reads it. */}}
{{- define "dedupd.zoneFile" -}}
/var/run/dedupd-zone/zone
{{- end -}}

{{/* Refuses zone values that contradict each other. */}}
{{- define "dedupd.checkZone" -}}
{{- if and (eq .Values.zone.source "fixed") (not .Values.zone.name) -}}
{{- fail "zone.source: fixed gives every pod the zone zone.name, which is empty. Set zone.name (letters, digits, '.', '_' and '-', at most 63), or choose another zone.source" -}}
{{- end -}}
{{- if and .Values.zone.name (ne .Values.zone.source "fixed") -}}
{{- fail (printf "zone.name (%s) is set but zone.source is %s, which does not read it. Set zone.source=fixed to give every pod that zone, or remove zone.name" .Values.zone.name .Values.zone.source) -}}
{{- end -}}
{{- end -}}

{{/*
The topologySpreadConstraints of a StatefulSet's pods. Arguments: root (the
chart's context), constraints (the value: null gives the chart's own) and
selector (the pods' selector labels, as YAML). The chart's own spreads the
pods evenly over the zones named by the node label zone.nodeLabel, at most
one pod more in one zone than in another, and still schedules a pod when
it cannot (a single zone, or a zone without room).
*/}}
{{- define "dedupd.topologySpreadConstraints" -}}
{{- if kindIs "invalid" .constraints -}}
- maxSkew: 1
  topologyKey: {{ .root.Values.zone.nodeLabel }}
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- .selector | nindent 6 }}
{{- else if .constraints -}}
{{- toYaml .constraints -}}
{{- end -}}
{{- end -}}
