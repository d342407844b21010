{{/*
helm test: one test Pod per enabled controller runs the controller's own image (distroless, so
the binary's `check` subcommand and no other image) to check that the controller's Service
answers /readyz with 200 and that each of its Leases (kcm-split.leaseNames) has a holder whose
lease has not expired. Each takes a controller context (dict "root" $ "alias" $alias "c" $c).
*/}}

{{/* Object name of a controller's test Pod, ServiceAccount, Role, RoleBinding, NetworkPolicy. */}}
{{- define "kcm-split.test.name" -}}
{{- printf "%s-test" (include "kcm-split.ctrlName" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels selecting a controller's test Pod: never the controller's own (its Service, PDB
and NetworkPolicy select app.kubernetes.io/component=<binary>). */}}
{{- define "kcm-split.test.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kcm-split.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .c.binary }}-test
{{- end -}}

{{- define "kcm-split.test.labels" -}}
{{ include "kcm-split.commonLabels" .root }}
app.kubernetes.io/component: {{ .c.binary }}-test
{{- end -}}

{{/* Hook annotations: run by `helm test`, the previous run's objects deleted before the next,
and everything deleted once every test passed (a failed test Pod stays, with its logs, until
the next `helm test`). weight orders the ServiceAccount, Role and binding before the Pod. */}}
{{- define "kcm-split.test.annotations" -}}
helm.sh/hook: test
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
