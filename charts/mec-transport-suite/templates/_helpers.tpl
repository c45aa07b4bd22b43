{{/* Names: <release>-<component>, at most 63 characters. */}}
{{- define "mts.fullname" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "mts.name" -}}
{{- printf "%s-%s" (include "mts.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mts.selectorLabels" -}}
app.kubernetes.io/name: mec-transport-suite
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mts.labels" -}}
{{ include "mts.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: mec-transport-suite
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "mts.image" -}}
{{- $img := .root.Values.image -}}
{{- printf "%s/%s:%s" $img.registry .values.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "mts.secretName" -}}
{{- default (printf "%s-credentials" (include "mts.fullname" .)) .Values.credentials.existingSecret -}}
{{- end -}}

{{- define "mts.amqpHost" -}}
{{- default (include "mts.name" (dict "root" . "component" "rabbitmq")) .Values.amqp.host -}}
{{- end -}}

{{- define "mts.platformUrl" -}}
{{- printf "http://%s:%v" (include "mts.name" (dict "root" . "component" "platform")) .Values.platform.service.port -}}
{{- end -}}

{{/*
The container environment of a service: credentials from the Secret first (so that later
values can refer to them as $(VAR)), then the chart's wiring, the service's env map and the
platform's mec.env; a name set in the service's env map overrides the chart's wiring, and
an empty value removes the variable.
Arguments: root, values (the service's values), prefix (e.g. "PEP_"), wiring (a dict).
*/}}
{{- define "mts.env" -}}
{{- $secret := include "mts.secretName" .root -}}
- name: MTS_AMQP_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ $secret }}, key: amqp-password}}
- name: {{ .prefix }}API_TOKENS
  valueFrom: {secretKeyRef: {name: {{ $secret }}, key: api-token}}
{{- $amqp := .root.Values.amqp }}
{{- $vhost := $amqp.vhost | urlquery }}
{{- $env := dict
  (printf "%sAMQP_URL" .prefix) (printf "amqp://%s:$(MTS_AMQP_PASSWORD)@%s:%v/%s" $amqp.user (include "mts.amqpHost" .root) $amqp.port $vhost)
  (printf "%sLOG_FORMAT" .prefix) "json"
  (printf "%sSTATE_DIR" .prefix) "/var/lib/mts"
}}
{{- $env = merge $env .wiring }}
{{- $public := .values.publicUrl | default "" }}
{{- if $public }}{{- $_ := set $env (printf "%sPUBLIC_URL" .prefix) $public }}{{- end }}
{{- $_ := set $env (printf "%sTRUSTED_PROXIES" .prefix) (join "," (.root.Values.trustedProxies | default list)) }}
{{- range $k, $v := .values.env }}
{{- $_ := set $env $k $v }}
{{- end }}
{{- range $k, $v := .root.Values.mec.env }}
{{- $_ := set $env $k $v }}
{{- end }}
{{- range $k := keys $env | sortAlpha }}
{{- $v := get $env $k | toString }}
{{- if ne $v "" }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Probes on the service's HTTP port: ready = /healthz answers 200 (dependencies up);
alive = the port accepts connections. A lost broker or RAN source makes a pod unready,
never restarts it (the service retries with backoff by itself). */}}
{{- define "mts.probes" -}}
startupProbe:
  tcpSocket: {port: http}
  periodSeconds: 2
  failureThreshold: 60
readinessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
livenessProbe:
  tcpSocket: {port: http}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 6
{{- end -}}

{{/* Scheduling of a pod: the service's own keys, else the chart-wide ones. */}}
{{- define "mts.scheduling" -}}
{{- with (default .root.Values.nodeSelector .values.nodeSelector) }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default .root.Values.tolerations .values.tolerations) }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default .root.Values.affinity .values.affinity) }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An unprivileged container: non-root, no capabilities, read-only root filesystem. */}}
{{- define "mts.restrictedSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{/* The PersistentVolumeClaim of a Deployment's state (.c: the component's dict, .v: its
values), when its persistence is enabled; named after the component. */}}
{{- define "mts.stateClaim" -}}
{{- if .v.persistence.enabled }}
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {{ include "mts.name" .c }}
  labels: {{- include "mts.labels" .c | nindent 4 }}
spec:
  accessModes: [ReadWriteOnce]
  {{- with .v.persistence.storageClass }}
  storageClassName: {{ . }}
  {{- end }}
  resources:
    requests: {storage: {{ .v.persistence.size }}}
---
{{- end }}
{{- end -}}

{{/* The state volume of a Deployment: its claim, or an emptyDir without persistence. */}}
{{- define "mts.stateVolume" -}}
- name: state
  {{- if .v.persistence.enabled }}
  persistentVolumeClaim: {claimName: {{ include "mts.name" .c }}}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end -}}
