{{/*
The cluster Jobs (values: clusterJobs): Helm hooks that run dedupctl from
the dedupd image against the client Service, so that a replicated cluster
follows replicaCount. "true" when they are rendered.
*/}}
{{- define "dedupd.clusterJobsEnabled" -}}
{{- if and (eq (include "dedupd.replicated" .) "true") .Values.clusterJobs.enabled -}}true{{- end -}}
{{- end -}}

{{/*
"true" when the Jobs present the nodes' own certificate, issued by the
chart: the chart then grants its identity cluster beside replica.
*/}}
{{- define "dedupd.clusterJobsUseNodeCertificate" -}}
{{- if and (eq (include "dedupd.clusterJobsEnabled" .) "true") .Values.tls.enabled .Values.tls.certManager.enabled (not .Values.clusterJobs.tlsSecretName) -}}true{{- end -}}
{{- end -}}

{{/* The Secret with the Jobs' client certificate, when TLS is on. */}}
{{- define "dedupd.clusterJobsTlsSecretName" -}}
{{- .Values.clusterJobs.tlsSecretName | default (include "dedupd.tlsSecretName" .) -}}
{{- end -}}

{{/*
Labels of the Jobs' pods: apart from dedupd's selector labels, so that
neither the Services nor the PodDisruptionBudget count them.
*/}}
{{- define "dedupd.clusterJobSelectorLabels" -}}
app.kubernetes.io/name: {{ include "dedupd.name" . }}-cluster-job
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: cluster-job
{{- end -}}

{{/*
One cluster Job. Arguments: root (the chart's context), job (the command
of files/cluster-job.sh, "drain" or "rebalance") and hook (Helm's hook
events).
*/}}
{{- define "dedupd.clusterJob" -}}
{{- $root := .root -}}
{{- $jobs := $root.Values.clusterJobs -}}
{{- with $root -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "dedupd.fullname" . }}-{{ $.job }}
  labels:
    {{- include "dedupd.labels" . | nindent 4 }}
    app.kubernetes.io/component: cluster-job
  annotations:
    helm.sh/hook: {{ $.hook }}
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  # The script is safe to run again: a retry picks up where it stopped.
  backoffLimit: {{ int $jobs.backoffLimit }}
  activeDeadlineSeconds: {{ int $jobs.activeDeadlineSeconds }}
  template:
    metadata:
      labels:
        {{- include "dedupd.clusterJobSelectorLabels" . | nindent 8 }}
        dedupd/cluster-job: {{ $.job }}
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        {{- toYaml .Values.podSecurityContext | nindent 8 }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ $.job }}
          image: {{ include "dedupd.image" . | quote }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command:
            - /bin/sh
            - -ec
            - |
              {{- regexReplaceAll "(?m)^ +$" (.Files.Get "files/cluster-job.sh" | nindent 14) "" }}
            - cluster-job.sh
            - {{ $.job }}
          env:
            - name: DEDUPCTL
              value: /usr/local/bin/dedupctl
            - name: DEDUPCTL_TARGET
              value: {{ printf "%s:%d" (include "dedupd.fullname" .) (int .Values.service.port) | quote }}
            - name: DEDUPCTL_TLS
              value: {{ ternary "--tls_ca=/etc/dedupd-tls/ca.crt --tls_cert=/etc/dedupd-tls/tls.crt --tls_key=/etc/dedupd-tls/tls.key" "" .Values.tls.enabled | quote }}
            - name: NODE_COUNT
              value: {{ include "dedupd.replicaCount" . | quote }}
            - name: NODE_PREFIX
              value: {{ printf "%s-" (include "dedupd.fullname" .) | quote }}
            - name: NODE_SUFFIX
              value: {{ include "dedupd.nodeAddressSuffix" . | quote }}
            - name: WAIT
              value: {{ $jobs.wait | quote }}
          securityContext:
            {{- toYaml .Values.securityContext | nindent 12 }}
          {{- with $jobs.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- if .Values.tls.enabled }}
          volumeMounts:
            - name: tls
              mountPath: /etc/dedupd-tls
              readOnly: true
          {{- end }}
      {{- if .Values.tls.enabled }}
      volumes:
        - name: tls
          secret:
            secretName: {{ include "dedupd.clusterJobsTlsSecretName" . }}
      {{- end }}
{{- end -}}
{{- end -}}
