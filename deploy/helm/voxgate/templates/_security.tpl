{{/* TLS, mutual TLS and bearer tokens for the service container: Secrets mounted read-only. */}}

{{- define "voxgate.tlsDir" -}}/etc/voxgate/tls{{- end }}
{{- define "voxgate.clientCADir" -}}/etc/voxgate/client-ca{{- end }}
{{- define "voxgate.probeCADir" -}}/etc/voxgate/probe-ca{{- end }}
{{- define "voxgate.probeCertDir" -}}/etc/voxgate/probe-client{{- end }}
{{- define "voxgate.authDir" -}}/etc/voxgate/auth{{- end }}

{{/* Fails rendering on settings that do not go together (a pod that could never start). */}}
{{- define "voxgate.validateSecurity" -}}
{{- $tls := .Values.tls }}
{{- if $tls.enabled }}
{{- $_ := required "tls.secretName: the kubernetes.io/tls Secret to serve TLS with (tls.enabled=true)" $tls.secretName }}
{{- else if or $tls.clientCA.secretName $tls.clientCA.probeCertSecretName }}
{{- fail "tls.clientCA (mutual TLS) needs tls.enabled=true and tls.secretName" }}
{{- end }}
{{- if and $tls.clientCA.secretName (not $tls.clientCA.key) }}
{{- fail "tls.clientCA.key: the key of the CA bundle in tls.clientCA.secretName" }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- $_ := required "auth.secretName: the Secret holding the token file (auth.enabled=true)" .Values.auth.secretName }}
{{- $_ := required "auth.key: the token file's key in auth.secretName" .Values.auth.key }}
{{- end }}
{{- end }}

{{/* `voxgate serve` flags for TLS, mTLS and tokens: files of the mounted Secrets. */}}
{{- define "voxgate.securityArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-cert
- {{ printf "%s/tls.crt" (include "voxgate.tlsDir" .) | quote }}
- --tls-key
- {{ printf "%s/tls.key" (include "voxgate.tlsDir" .) | quote }}
{{- with .Values.tls.clientCA.secretName }}
- --tls-client-ca
- {{ printf "%s/%s" (include "voxgate.clientCADir" $) $.Values.tls.clientCA.key | quote }}
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
- --auth-tokens-file
- {{ printf "%s/%s" (include "voxgate.authDir" .) .Values.auth.key | quote }}
{{- end }}
{{- end }}

{{- define "voxgate.securityMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: {{ include "voxgate.tlsDir" . }}
  readOnly: true
{{- if .Values.tls.clientCA.secretName }}
- name: tls-client-ca
  mountPath: {{ include "voxgate.clientCADir" . }}
  readOnly: true
{{- end }}
{{- if .Values.tls.clientCA.probeCertSecretName }}
- name: tls-probe-client
  mountPath: {{ include "voxgate.probeCertDir" . }}
  readOnly: true
{{- end }}
{{- if and .Values.tls.probe.caSecretName .Values.tls.probe.caKey }}
- name: tls-probe-ca
  mountPath: {{ include "voxgate.probeCADir" . }}
  readOnly: true
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
- name: auth-tokens
  mountPath: {{ include "voxgate.authDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* 288 = 0440: owner root, group fsGroup (10001), so the service's user reads them and no one else. */}}
{{- define "voxgate.securityVolumes" -}}
{{- $secrets := list }}
{{- if .Values.tls.enabled }}
{{- $secrets = append $secrets (list "tls" .Values.tls.secretName) }}
{{- with .Values.tls.clientCA.secretName }}
{{- $secrets = append $secrets (list "tls-client-ca" .) }}
{{- end }}
{{- with .Values.tls.clientCA.probeCertSecretName }}
{{- $secrets = append $secrets (list "tls-probe-client" .) }}
{{- end }}
{{- if and .Values.tls.probe.caSecretName .Values.tls.probe.caKey }}
{{- $secrets = append $secrets (list "tls-probe-ca" .Values.tls.probe.caSecretName) }}
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- $secrets = append $secrets (list "auth-tokens" .Values.auth.secretName) }}
{{- end }}
{{- range $secrets }}
- name: {{ index . 0 }}
  secret:
    secretName: {{ index . 1 | quote }}
    defaultMode: 288
{{- end }}
{{- end }}

{{/* The service's probe: gRPC health ("" live, voxgate.v1.Speech ready). Plaintext: Kubernetes' own
gRPC probe. TLS: an exec probe, `voxgate status --check` over TLS (and mTLS) to 127.0.0.1; health
needs no token. Args: dict root, check ("live" | "ready"), timeout (seconds, the probe's). */}}
{{- define "voxgate.serviceProbe" -}}
{{- $ := .root }}
{{- $tls := $.Values.tls }}
{{- if not $tls.enabled }}
grpc:
  port: {{ $.Values.grpc.port }}
  service: {{ ternary "voxgate.v1.Speech" "" (eq .check "ready") | quote }}
{{- else }}
exec:
  command:
    - voxgate
    - status
    - --check
    - {{ .check }}
    - --server
    - {{ printf "127.0.0.1:%v" $.Values.grpc.port | quote }}
    - --timeout
    - {{ sub .timeout 1 | quote }}
    - --tls-server-name
    - {{ $tls.probe.serverName | default (printf "%s.%s.svc" (include "voxgate.fullname" $) $.Release.Namespace) | quote }}
    {{- if not $tls.probe.caKey }}
    - --tls
    {{- else if $tls.probe.caSecretName }}
    - --tls-ca
    - {{ printf "%s/%s" (include "voxgate.probeCADir" $) $tls.probe.caKey | quote }}
    {{- else }}
    - --tls-ca
    - {{ printf "%s/%s" (include "voxgate.tlsDir" $) $tls.probe.caKey | quote }}
    {{- end }}
    {{- if $tls.clientCA.secretName }}
    {{- $dir := ternary (include "voxgate.probeCertDir" $) (include "voxgate.tlsDir" $) (not (empty $tls.clientCA.probeCertSecretName)) }}
    - --tls-cert
    - {{ printf "%s/tls.crt" $dir | quote }}
    - --tls-key
    - {{ printf "%s/tls.key" $dir | quote }}
    {{- end }}
{{- end }}
timeoutSeconds: {{ .timeout }}
{{- end }}
