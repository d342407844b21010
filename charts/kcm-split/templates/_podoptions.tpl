{{/*
Pod options real clusters need, per controller (controllers.<alias>) over the defaults
(defaults.*): host network and DNS policy, security contexts, extra environment and volumes,
the ServiceAccount. Each helper takes a controller context (dict "root" $ "alias" $alias "c" $c).
*/}}

{{/* "true" when the Pod runs in the node's network namespace: the controller's value, else the defaults'. */}}
{{- define "kcm-split.hostNetwork" -}}
{{- if kindIs "invalid" .c.hostNetwork -}}{{ .root.Values.defaults.hostNetwork | default false }}{{- else -}}{{ .c.hostNetwork }}{{- end -}}
{{- end -}}

{{/*
dnsPolicy: the controller's, else the defaults', else ClusterFirstWithHostNet with hostNetwork
(a host-network Pod with the default ClusterFirst resolves with the node's resolv.conf, so
cluster names would not resolve), else nothing (the cluster's default, ClusterFirst).
*/}}
{{- define "kcm-split.dnsPolicy" -}}
{{- $p := .c.dnsPolicy | default .root.Values.defaults.dnsPolicy -}}
{{- if $p -}}{{ $p }}{{- else if eq (include "kcm-split.hostNetwork" .) "true" -}}ClusterFirstWithHostNet{{- end -}}
{{- end -}}

{{/* Pod securityContext: the controller's when set (it replaces the defaults' whole), else the defaults' (restricted). */}}
{{- define "kcm-split.podSecurityContext" -}}
{{- with (.c.podSecurityContext | default .root.Values.defaults.podSecurityContext) }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Container securityContext: the controller's when set (it replaces the defaults' whole), else the defaults' (restricted). */}}
{{- define "kcm-split.containerSecurityContext" -}}
{{- with (.c.containerSecurityContext | default .root.Values.defaults.containerSecurityContext) }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Extra env, volumes and mounts: the defaults' then the controller's. */}}
{{- define "kcm-split.extraEnv" -}}
{{- with concat (.root.Values.defaults.extraEnv | default list) (.c.extraEnv | default list) }}{{ toYaml . }}{{ end -}}
{{- end -}}
{{- define "kcm-split.extraVolumes" -}}
{{- with concat (.root.Values.defaults.extraVolumes | default list) (.c.extraVolumes | default list) }}{{ toYaml . }}{{ end -}}
{{- end -}}
{{- define "kcm-split.extraVolumeMounts" -}}
{{- with concat (.root.Values.defaults.extraVolumeMounts | default list) (.c.extraVolumeMounts | default list) }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/*
The controller's ServiceAccount: controllers.<alias>.serviceAccountName, else the controller's
object name. The chart creates it unless serviceAccount.create is false (bring your own: it must
exist before the Pods start); RBAC binds that name either way.
*/}}
{{- define "kcm-split.serviceAccountName" -}}
{{- .c.serviceAccountName | default (include "kcm-split.ctrlName" .) -}}
{{- end -}}
