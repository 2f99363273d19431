{{/* The engine sidecar container: a native sidecar (init container) or a plain one. */}}
{{- define "voxgate.engineContainer" -}}
{{- $ := .root }}
{{- $preset := .preset }}
name: engine
image: "{{ .image.repository }}:{{ .image.tag | default $.Chart.AppVersion }}"
imagePullPolicy: {{ .image.pullPolicy }}
command: ["python3", "-m", "engine_sidecar"]
args:
  - --engine
  - {{ $preset.engine | quote }}
  - --model
  - {{ ternary "" $.Values.model (ne $preset.engine "voxtral") | quote }}
  - --socket
  - {{ .socket | quote }}
  - --max-sessions
  - {{ $preset.maxSessions | quote }}
  {{- range $key, $value := $preset.engineOptions }}
  - --engine-option
  - {{ printf "%s=%s" $key (toJson $value) | quote }}
  {{- end }}
  {{- range $.Values.engine.extraArgs }}
  - {{ . | quote }}
  {{- end }}
env:
  - name: PYTHONUNBUFFERED
    value: "1"
  - name: HF_HOME
    value: /cache/huggingface
  - name: XDG_CACHE_HOME
    value: /cache
  - name: VLLM_CACHE_ROOT
    value: /cache/vllm
  {{- range $k, $v := merge (dict) $.Values.engine.extraEnv $preset.env }}
  - name: {{ $k }}
    value: {{ $v | quote }}
  {{- end }}
  {{- with $.Values.engine.hfTokenSecret }}
  - name: HF_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ . }}
        key: HF_TOKEN
  {{- end }}
resources:
  requests:
    {{- toYaml $preset.resources.requests | nindent 4 }}
    {{- if $preset.gpus }}
    nvidia.com/gpu: {{ $preset.gpus }}
    {{- end }}
  limits:
    {{- toYaml $preset.resources.limits | nindent 4 }}
    {{- if $preset.gpus }}
    nvidia.com/gpu: {{ $preset.gpus }}
    {{- end }}
# Up once the engine has loaded and answers on the socket; restarted if it stops answering.
startupProbe:
  exec:
    command: ["voxgate-healthcheck", "--socket", {{ .socket | quote }}]
  periodSeconds: 10
  timeoutSeconds: 6
  failureThreshold: {{ div $.Values.engine.startupSeconds 10 }}
livenessProbe:
  exec:
    command: ["voxgate-healthcheck", "--socket", {{ .socket | quote }}]
  periodSeconds: 15
  timeoutSeconds: 6
  failureThreshold: 4
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
volumeMounts:
  - name: engine-socket
    mountPath: /run/voxgate
  - name: cache
    mountPath: /cache
  - name: tmp
    mountPath: /tmp
  {{- if $preset.gpus }}
  - name: dshm
    mountPath: /dev/shm
  {{- end }}
{{- end }}
