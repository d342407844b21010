{{/*
How each binary serves metrics and health: the only place that knows the flags, the scheme
and the port. Deployment probes, the metrics Service, the ServiceMonitor and the RBAC every
controller needs for it use these.

Each binary serves /metrics, /healthz, /readyz and /livez over HTTPS on --secure-port (its own
port). /metrics needs a bearer token the controller checks with a TokenReview and a
SubjectAccessReview (get on the non-resource URL /metrics: the built-in system:monitoring role
has it); the health paths are open, so kubelet probes need no credentials. The certificate is
self-signed at start unless serving.tlsSecretName names a kubernetes.io/tls Secret. That Secret
is mounted whole, never with subPath, so the kubelet updates the files on renewal and the
binary reloads them: no checksum annotation or restart is needed.
*/}}

{{/* Command-line flags for serving. */}}
{{- define "kcm-split.serving.args" -}}
- --secure-port={{ int .c.port }}
{{- if .root.Values.serving.tlsSecretName }}
- --tls-cert-file=/etc/kcm-split/tls/tls.crt
- --tls-private-key-file=/etc/kcm-split/tls/tls.key
{{- end }}
{{- end -}}

{{/* Volumes and mounts for the serving certificate, if any. */}}
{{- define "kcm-split.serving.volumes" -}}
{{- with .root.Values.serving.tlsSecretName }}
- name: serving-tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- if .root.Values.leaderMigration.enabled }}
- name: leader-migration
  configMap:
    name: {{ include "kcm-split.leaderMigration.configMapName" .root }}
{{- end }}
{{- end -}}

{{- define "kcm-split.serving.volumeMounts" -}}
{{- if .root.Values.serving.tlsSecretName }}
- name: serving-tls
  mountPath: /etc/kcm-split/tls
  readOnly: true
{{- end }}
{{- if .root.Values.leaderMigration.enabled }}
- name: leader-migration
  mountPath: /etc/kcm-split/leader-migration
  readOnly: true
{{- end }}
{{- end -}}

{{/* Scheme of /metrics, /healthz and /readyz: HTTP or HTTPS (probes want it upper case). */}}
{{- define "kcm-split.serving.scheme" -}}
HTTPS
{{- end -}}

{{/* Name of the container port serving metrics and health. */}}
{{- define "kcm-split.serving.portName" -}}
https
{{- end -}}

{{/* Fields of a ServiceMonitor endpoint for this scheme: TLS and the scraper's token. */}}
{{- define "kcm-split.serving.serviceMonitorEndpoint" -}}
scheme: https
{{- with .root.Values.serviceMonitor.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- /* bearerTokenFile (deprecated by Prometheus Operator) only when set; else a token from a
Secret through authorization (kcm-split.scraper.secretName). */}}
{{- with .root.Values.serviceMonitor.bearerTokenFile }}
bearerTokenFile: {{ . }}
{{- else }}
{{- if .root.Values.serviceMonitor.authorization.enabled }}
authorization:
  type: Bearer
  credentials:
    name: {{ include "kcm-split.scraper.secretName" .root }}
    key: {{ .root.Values.serviceMonitor.authorization.credentials.key | default "token" }}
{{- end }}
{{- end }}
{{- end -}}

{{/* ClusterRole rules every controller needs to serve: delegated authentication and
authorization of scrapers (what upstream's system:auth-delegator grants). */}}
{{- define "kcm-split.serving.clusterRules" -}}
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end -}}
