{{/*
Names and labels. Templates render one object per enabled controller: they range over
.Values.controllers and call the helpers below with a controller context,
(dict "root" $ "alias" $alias "c" $controllerValues).
*/}}

{{- define "kcm-split.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kcm-split.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kcm-split.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object name of a controller's Deployment, ServiceAccount, Service, roles, PDB. */}}
{{- define "kcm-split.ctrlName" -}}
{{- printf "%s-%s" (include "kcm-split.fullname" .root) .c.binary | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "kcm-split.commonLabels" -}}
helm.sh/chart: {{ include "kcm-split.chart" . }}
app.kubernetes.io/name: {{ include "kcm-split.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kcm-split
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.defaults.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kcm-split.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kcm-split.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .c.binary }}
{{- end -}}

{{- define "kcm-split.labels" -}}
{{ include "kcm-split.commonLabels" .root }}
app.kubernetes.io/component: {{ .c.binary }}
{{- end -}}

{{- define "kcm-split.image" -}}
{{- $d := .root.Values.defaults.image -}}
{{- $repo := .c.image.repository | default (printf "%s/%s" $d.registry .c.binary) -}}
{{- $tag := .c.image.tag | default $d.tag | default .root.Chart.AppVersion -}}
{{- /* A digest pins the image whatever the tag says: it wins over the tag. */ -}}
{{- if .c.image.digest -}}
{{- printf "%s@%s" $repo .c.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{- define "kcm-split.leaseName" -}}
{{- .c.leaseName | default .c.binary -}}
{{- end -}}

{{/*
Shards (controllers.<alias>.shards: endpoints and quota only, the schema refuses it elsewhere).
A controller of N > 1 shards renders one Deployment (and PDB) per shard, each given --shards=N
--shard-index=I; templates that render per shard range over (until N) and call the helpers
below with the controller context plus "shard" (dict "index" I "count" N). Without "shard" a
helper means shard 0 of the controller's count. With N = 1 and shardLayoutFence off nothing
of this is rendered: today's manifests, byte for byte.
*/}}
{{- define "kcm-split.shards" -}}
{{- int (.c.shards | default 1) -}}
{{- end -}}

{{/* "true" when the Pods take part in the layout protocol (--shards given): N > 1, or N = 1
with shardLayoutFence (the way back from N shards to one replica). */}}
{{- define "kcm-split.layoutFence" -}}
{{- or (gt (int (include "kcm-split.shards" .)) 1) (eq (toString .c.shardLayoutFence) "true") -}}
{{- end -}}

{{/* The shard hash of a sharded layout (controllers.<alias>.shardHash, default mixed), "" for
one shard (one shard owns everything: no hash, no hash in any name). Names and labels carry it
only when it is not fnv, the layouts before the choice of hash. */}}
{{- define "kcm-split.shardHash" -}}
{{- if gt (int (include "kcm-split.shards" .)) 1 -}}
{{- .c.shardHash | default "mixed" -}}
{{- end -}}
{{- end -}}

{{- define "kcm-split.shardHashSuffix" -}}
{{- $h := include "kcm-split.shardHash" . -}}
{{- if and $h (ne $h "fnv") -}}-{{ $h }}{{- end -}}
{{- end -}}

{{- define "kcm-split.shard" -}}
{{- $s := .shard | default (dict "index" 0 "count" (int (include "kcm-split.shards" .))) -}}
{{- toJson $s -}}
{{- end -}}

{{/* A shard's Lease: the binary's shared/sharding LeaseName, the unsharded Lease for one
shard, <leaseName>-shard-<I>-of-<N>[-<hash>] otherwise (no hash for fnv). The one place the
chart computes it. */}}
{{- define "kcm-split.shardLeaseName" -}}
{{- $s := include "kcm-split.shard" . | fromJson -}}
{{- $base := include "kcm-split.leaseName" . -}}
{{- if gt (int $s.count) 1 -}}
{{- printf "%s-shard-%d-of-%d%s" $base (int $s.index) (int $s.count) (include "kcm-split.shardHashSuffix" .) -}}
{{- else -}}
{{- $base -}}
{{- end -}}
{{- end -}}

{{/* Every Lease of the controller's layout, as a JSON list (use with fromJsonArray): one per
shard, the one unsharded Lease with one shard. */}}
{{- define "kcm-split.leaseNames" -}}
{{- $n := int (include "kcm-split.shards" .) -}}
{{- $names := list -}}
{{- range $i := until $n -}}
{{- $names = append $names (include "kcm-split.shardLeaseName" (dict "root" $.root "alias" $.alias "c" $.c "shard" (dict "index" $i "count" $n))) -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/*
Leases of another layout of this controller that are held now (JSON list; empty in helm
template, where lookup sees no cluster, and without the layout fence). helm upgrade writes the Role before it deletes the old
layout's Deployments: without these names the old shards, still draining, could neither renew
nor release their Leases, and the new layout would wait for them to expire (a lease duration
with no controller) instead of starting on their release. A released Lease drops out at the
next upgrade. Matched by name (the unsharded Lease, or <leaseName>-shard-*), as the binary
names them.
*/}}
{{- define "kcm-split.heldOldLeases" -}}
{{- $base := include "kcm-split.leaseName" . -}}
{{- $own := include "kcm-split.leaseNames" . | fromJsonArray -}}
{{- $out := list -}}
{{- /* Only with the layout fence: an unsharded release never asks the cluster (its render
stays what it was, and helm needs no right to list Leases). */ -}}
{{- $all := dict -}}
{{- if eq (include "kcm-split.layoutFence" .) "true" -}}
{{- $all = lookup "coordination.k8s.io/v1" "Lease" .root.Release.Namespace "" -}}
{{- end -}}
{{- range $l := ($all.items | default list) -}}
{{- $name := $l.metadata.name -}}
{{- if and (or (eq $name $base) (hasPrefix (printf "%s-shard-" $base) $name)) (not (has $name $own)) (dig "spec" "holderIdentity" "" $l) -}}
{{- $out = append $out $name -}}
{{- end -}}
{{- end -}}
{{- toJson (sortAlpha $out) -}}
{{- end -}}

{{/* Object name of a shard's Deployment and PDB: the controller's name with one shard,
<name>-shard-<I>-of-<N>[-<hash>] otherwise (the name carries the layout, so changing the count
or the hash replaces the Deployments instead of rolling the old ones into the new layout; see
the chart README). The
controller's name is shortened, never the suffix, so two shards never share a name. */}}
{{- define "kcm-split.shardName" -}}
{{- $s := include "kcm-split.shard" . | fromJson -}}
{{- $name := include "kcm-split.ctrlName" . -}}
{{- if gt (int $s.count) 1 -}}
{{- $suffix := printf "-shard-%d-of-%d%s" (int $s.index) (int $s.count) (include "kcm-split.shardHashSuffix" .) -}}
{{- printf "%s%s" ($name | trunc (int (sub 63 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- else -}}
{{- $name -}}
{{- end -}}
{{- end -}}

{{/* The layout labels (the same keys the binary puts on its Lease), with the layout fence only. */}}
{{- define "kcm-split.shardLabels" -}}
{{- if eq (include "kcm-split.layoutFence" .) "true" -}}
{{- $s := include "kcm-split.shard" . | fromJson -}}
kcm-split.io/shards: {{ int $s.count | quote }}
kcm-split.io/shard-index: {{ int $s.index | quote }}
{{- with (include "kcm-split.shardHashSuffix" .) }}
kcm-split.io/shard-hash: {{ include "kcm-split.shardHash" $ | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* Labels selecting one shard's Pods (Deployment selector, PDB, spreading): the controller's
selector labels, plus the layout labels with more than one shard. Both shards and index: during
a change of N the Deployments of both layouts run side by side and must not select each other's
Pods. With one shard the selector stays today's (a Deployment's selector cannot change). */}}
{{- define "kcm-split.shardSelectorLabels" -}}
{{ include "kcm-split.selectorLabels" . }}
{{- $s := include "kcm-split.shard" . | fromJson -}}
{{- if gt (int $s.count) 1 }}
{{ include "kcm-split.shardLabels" . }}
{{- end -}}
{{- end -}}

{{- define "kcm-split.replicas" -}}
{{- if kindIs "invalid" .c.replicas -}}{{ .root.Values.defaults.replicas }}{{- else -}}{{ .c.replicas }}{{- end -}}
{{- end -}}

{{/* This shard's entry of controllers.<alias>.shardOverrides (JSON; {} with one shard or none
given): a larger client budget for a shard that holds more than its share. An entry for a
shard the layout does not have fails the render rather than being ignored. */}}
{{- define "kcm-split.shardOverride" -}}
{{- $s := include "kcm-split.shard" . | fromJson -}}
{{- $all := .c.shardOverrides | default dict -}}
{{- if and $all (eq (int $s.count) 1) -}}
{{- fail (printf "controllers.%s.shardOverrides: set with shards=1; a shard override needs shards > 1 (one replica's budget is kubeAPIQPS/kubeAPIBurst)" .alias) -}}
{{- end -}}
{{- range $k := keys $all | sortAlpha -}}
{{- if ge (atoi $k) (int $s.count) -}}
{{- fail (printf "controllers.%s.shardOverrides.%s: no such shard with shards=%d (0 to %d)" $.alias $k (int $s.count) (sub (int $s.count) 1)) -}}
{{- end -}}
{{- end -}}
{{- if gt (int $s.count) 1 -}}
{{- toJson (index $all (toString (int $s.index)) | default dict) -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/*
Command line. Common flags first, then the controller's own flags (sorted, so a values change
that does not change a flag never changes the Pod template), then extra arguments: the binary
takes the last value of a repeated flag, so extraArgs override everything.
*/}}
{{- define "kcm-split.args" -}}
{{- $d := .root.Values.defaults -}}
- --leader-elect-resource-namespace={{ .root.Release.Namespace }}
- --leader-elect-resource-name={{ include "kcm-split.leaseName" . }}
{{- if eq (include "kcm-split.layoutFence" .) "true" }}
{{- $s := include "kcm-split.shard" . | fromJson }}
- --shards={{ int $s.count }}
- --shard-index={{ int $s.index }}
{{- with (include "kcm-split.shardHash" .) }}
- --shard-hash={{ . }}
{{- end }}
{{- end }}
- --leader-elect-lease-duration={{ $d.leaderElection.leaseDuration }}
- --leader-elect-renew-deadline={{ $d.leaderElection.renewDeadline }}
- --leader-elect-retry-period={{ $d.leaderElection.retryPeriod }}
{{- $o := include "kcm-split.shardOverride" . | fromJson }}
{{- $qps := $o.kubeAPIQPS | default .c.kubeAPIQPS | default $d.kubeAPIQPS }}
{{- $burst := $o.kubeAPIBurst | default .c.kubeAPIBurst | default $d.kubeAPIBurst }}
{{- if not (kindIs "invalid" $qps) }}
- --kube-api-qps={{ include "kcm-split.flagValue" $qps }}
{{- end }}
{{- if not (kindIs "invalid" $burst) }}
- --kube-api-burst={{ int64 $burst }}
{{- end }}
- --log-level={{ .c.logLevel | default $d.logLevel }}
- --log-format={{ $d.logFormat }}
- --shutdown-grace-period={{ $d.shutdownGracePeriod }}
{{ include "kcm-split.serving.args" . }}
{{- if .root.Values.leaderMigration.enabled }}
- --enable-leader-migration
- --leader-migration-config=/etc/kcm-split/leader-migration/config.yaml
- --leader-migration-resource-namespace={{ .root.Values.leaderMigration.namespace }}
{{- end }}
{{- if .root.Values.takeOverFromKCM.enabled }}
{{- $to := .root.Values.takeOverFromKCM }}
- --take-over-from-kcm
- --kcm-namespace={{ $to.namespace }}
- {{ printf "--kcm-pod-selector=%s" $to.podSelector | quote }}
- --kcm-lease-name={{ $to.leaseName }}
{{- range $host := keys ($to.leaseHostNodes | default dict) | sortAlpha }}
- {{ printf "--kcm-lease-host-nodes=%s=%s" $host (index $to.leaseHostNodes $host) | quote }}
{{- end }}
{{- end }}
{{- range $k := keys .c.flags | sortAlpha }}
- {{ printf "--%s=%s" $k (include "kcm-split.flagValue" (index $.c.flags $k)) | quote }}
{{- end }}
{{- range concat $d.extraArgs .c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
Placement. Spreading uses a topologySpreadConstraint rather than pod anti-affinity: with
matchLabelKeys pod-template-hash it counts only the Pods of one rollout, so the surge Pod of an
upgrade (maxSurge 1) does not count the old Pods it replaces and the new pair ends up on two
nodes, where anti-affinity on a two-node cluster finds no free node for it and may leave both
new Pods on one; it counts only the nodes the nodeSelector allows (nodeAffinityPolicy Honor),
so with controlPlane the spread is over control-plane nodes; and it is cheaper for the
scheduler than inter-pod anti-affinity in large clusters. ScheduleAnyway only scores nodes, so
a one-node cluster still runs every replica.
*/}}
{{- define "kcm-split.controlPlane" -}}
{{- if kindIs "invalid" .c.controlPlane -}}{{ .root.Values.defaults.controlPlane }}{{- else -}}{{ .c.controlPlane }}{{- end -}}
{{- end -}}

{{/* nodeSelector: the controller's, else the defaults', plus the control-plane role with controlPlane. */}}
{{- define "kcm-split.nodeSelector" -}}
{{- $sel := deepCopy (.c.nodeSelector | default .root.Values.defaults.nodeSelector | default dict) -}}
{{- if eq (include "kcm-split.controlPlane" .) "true" -}}
{{- $_ := set $sel "node-role.kubernetes.io/control-plane" "" -}}
{{- end -}}
{{- with $sel }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* tolerations: the controller's, else the defaults', plus the control-plane taint with
controlPlane, plus every NoExecute taint for defaults.noExecuteTolerationSeconds (unless null). */}}
{{- define "kcm-split.tolerations" -}}
{{- $tol := .c.tolerations | default .root.Values.defaults.tolerations | default list -}}
{{- if eq (include "kcm-split.controlPlane" .) "true" -}}
{{- $tol = append $tol (dict "key" "node-role.kubernetes.io/control-plane" "operator" "Exists" "effect" "NoSchedule") -}}
{{- end -}}
{{- $secs := .root.Values.defaults.noExecuteTolerationSeconds -}}
{{- if not (kindIs "invalid" $secs) -}}
{{- $tol = append $tol (dict "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int64 $secs)) -}}
{{- end -}}
{{- with $tol }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* topologySpreadConstraints per defaults.topologySpread. */}}
{{- define "kcm-split.topologySpread" -}}
{{- $mode := .root.Values.defaults.topologySpread -}}
{{- if ne $mode "none" -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: {{ eq $mode "hard" | ternary "DoNotSchedule" "ScheduleAnyway" }}
  labelSelector:
    matchLabels:
      {{- include "kcm-split.shardSelectorLabels" . | nindent 6 }}
  matchLabelKeys: [pod-template-hash]
{{- end -}}
{{- end -}}

{{/* Affinity: the controller's, else the defaults', else anti-affinity per defaults.podAntiAffinity. */}}
{{- define "kcm-split.affinity" -}}
{{- $d := .root.Values.defaults -}}
{{- if .c.affinity -}}
{{ toYaml .c.affinity }}
{{- else if $d.affinity -}}
{{ toYaml $d.affinity }}
{{- else if eq $d.podAntiAffinity "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "kcm-split.shardSelectorLabels" . | nindent 12 }}
{{- else if eq $d.podAntiAffinity "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "kcm-split.shardSelectorLabels" . | nindent 10 }}
{{- end -}}
{{- end -}}

{{/* A flag value as the binary parses it: YAML numbers arrive as float64, and whole ones
must not print as 1e+06. */}}
{{- define "kcm-split.flagValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/*
Leader Migration. kube-controller-manager's names for the controllers each binary replaces: the
names a LeaderMigrationConfiguration lists (kube-controller-manager's own file lists the same).
*/}}
{{- define "kcm-split.leaderMigration.kcmNames" -}}
{{- $m := dict
  "endpoints" (list "endpoints-controller" "endpointslice-controller" "endpointslice-mirroring-controller")
  "namespace" (list "namespace-controller")
  "nodelifecycle" (list "node-lifecycle-controller" "taint-eviction-controller" "node-ipam-controller")
  "pvbinder" (list "persistentvolume-binder-controller")
  "quota" (list "resourcequota-controller")
  "servicelb" (list "service-lb-controller") -}}
{{- if not (hasKey $m .alias) -}}
{{- fail (printf "leaderMigration: the chart does not know kube-controller-manager's names for controllers.%s" .alias) -}}
{{- end -}}
{{- index $m .alias | toJson -}}
{{- end -}}

{{/* The LeaderMigrationConfiguration every enabled binary reads: each of its controllers owned by leaderMigration.owner. */}}
{{- define "kcm-split.leaderMigration.config" -}}
{{- $lm := .Values.leaderMigration -}}
apiVersion: controllermanager.config.k8s.io/v1
kind: LeaderMigrationConfiguration
leaderName: {{ $lm.leaderName }}
controllerLeaders:
{{- range $alias, $c := .Values.controllers }}
{{- if $c.enabled }}
{{- range include "kcm-split.leaderMigration.kcmNames" (dict "alias" $alias) | fromJsonArray }}
  - name: {{ . }}
    component: {{ $lm.owner }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "kcm-split.leaderMigration.configMapName" -}}
{{- printf "%s-leader-migration" (include "kcm-split.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A controller's scrape job as a Prometheus Operator ServiceMonitor sets it: the value of
the Service label serviceMonitor.jobLabel names, else the Service name. */}}
{{- define "kcm-split.alerts.job" -}}
{{- $job := include "kcm-split.ctrlName" . -}}
{{- $key := dig "jobLabel" "" .root.Values.serviceMonitor -}}
{{- if $key -}}
{{- $labels := include "kcm-split.labels" . | fromYaml -}}
{{- $job = get $labels $key | default $job -}}
{{- end -}}
{{- $job -}}
{{- end -}}
