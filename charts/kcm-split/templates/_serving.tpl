{{/*
How each binary serves metrics and health: the only place that knows the flags, the scheme
and the port. Deployment probes, the metrics Service and the ServiceMonitor all use these.
Today the binaries serve plain HTTP on --metrics-bind-address (health on the same port).
*/}}

{{/* Command-line flags for serving. */}}
{{- define "kcm-split.serving.args" -}}
- --metrics-bind-address=:{{ int .c.port }}
{{- end -}}

{{/* Scheme of /metrics, /healthz and /readyz: HTTP or HTTPS (probes want it upper case). */}}
{{- define "kcm-split.serving.scheme" -}}
HTTP
{{- end -}}

{{/* Name of the container port serving metrics and health. */}}
{{- define "kcm-split.serving.portName" -}}
metrics
{{- end -}}

{{/* Extra fields of a ServiceMonitor endpoint (TLS, authorization) for this scheme; none for HTTP. */}}
{{- define "kcm-split.serving.serviceMonitorEndpoint" -}}
scheme: {{ include "kcm-split.serving.scheme" . | lower }}
{{- end -}}
