{{- define "voxgate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "voxgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "voxgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "voxgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "voxgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "voxgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "voxgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "voxgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The selected engine preset (fails on an unknown name). */}}
{{- define "voxgate.preset" -}}
{{- $p := get .Values.presets .Values.preset }}
{{- if not $p }}
{{- fail (printf "preset %q is not one of: %s" .Values.preset (keys .Values.presets | sortAlpha | join ", ")) }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{- define "voxgate.terminationGracePeriodSeconds" -}}
{{- add .Values.drain.preStopSeconds .Values.drain.graceSeconds .Values.drain.marginSeconds }}
{{- end }}

{{/* In a subdirectory the sidecar creates 0700 itself: an emptyDir's own root is world-writable. */}}
{{- define "voxgate.socket" -}}/run/voxgate/engine/engine.sock{{- end }}
