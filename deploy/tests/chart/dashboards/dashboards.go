// Package dashboards builds the Grafana dashboards the chart ships,
// charts/kcm-split/dashboards/<alias>.json (one per controller binary) and overview.json,
// built with the Grafana Foundation SDK.
//
// Every controller dashboard has the same sections (replicas and leadership, secure port,
// reconciles, work queues, API requests, process), selected by the binary's job, then a
// section of the binary's own metrics. The job variable finds the binary's job by its
// reconcile metric's controller label, which is present for every controller the binary runs
// (whatever --controllers keeps). To add a controller: add it to binaries, run
// `go run ./gen` here, commit the JSON; dashboards_test.go fails while the committed JSON
// differs from what Generate returns.
package dashboards

//lint:file-ignore SA1019 the v2 schema (dashboardv2) needs Grafana 12 with its v2 API; the chart's ConfigMaps feed the Grafana sidecar, which loads the classic JSON model that every Grafana reads.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Tag is on every dashboard; each dashboard's links list the dashboards with it, which links
// the overview and every controller's dashboard both ways.
const Tag = "kcm-split"

// sel stands in queries for the selector of the dashboard's variables; rate for Grafana's
// rate window.
const (
	sel  = "$SEL"
	rate = "$__rate_interval"
)

// query is one PromQL expression and its legend.
type query struct{ expr, legend string }

// panel is a panel of a section: kind is timeseries (the default), stat or table.
type panel struct {
	title, unit, kind, desc string
	width                   uint32
	queries                 []query
}

// section is a row and its panels.
type section struct {
	title  string
	panels []panel
}

// binary is one controller binary: the controller label values of its reconcile metrics
// (one per upstream controller it runs) and its own sections.
type binary struct {
	alias, title string
	controllers  []string
	own          []section
}

func q(expr, legend string) query { return query{expr: expr, legend: legend} }

func ts(title, unit string, width uint32, desc string, qs ...query) panel {
	return panel{title: title, unit: unit, kind: "timeseries", desc: desc, width: width, queries: qs}
}

// p99 is the 99th percentile of histogram h grouped by the labels of by (le added).
func p99(h, by string) string {
	g := "le"
	if by != "" {
		g = by + ", le"
	}
	return fmt.Sprintf(`histogram_quantile(0.99, sum by (%s) (rate(%s_bucket{%s}[%s])))`, g, h, sel, rate)
}

// foreignAndLayout is the section of a binary that can share its objects with another writer
// and run as shards (endpoints, quota): the foreign-writer episodes by controller and the
// shard layout fence.
func foreignAndLayout() section {
	return section{title: "Other writers and shard layout", panels: []panel{
		ts("Foreign writer episodes by controller", "short", 12,
			"Episodes (a writer quiet for 10 minutes starts a new one) in which another field manager, such as kube-controller-manager still running the controller, wrote fields this controller owns; ForeignWriterDetected Events name it. Never fought.",
			q(`sum by (controller) (increase(kcm_split_foreign_writer_detected_total{$SEL}[$__rate_interval]))`, "{{controller}}")),
		ts("Shard layout: Leases of another layout blocking", "short", 12,
			"Sharded replicas only (a shards value set): Leases of another shard count of this binary held and fresh; above 0 the replica starts nothing and its writes are refused (reason other_shard_layout) until that layout is gone. -1 before the Leases are listed.",
			q(`max by (instance, shard, shards) (kcm_split_shard_layout_blocking_leases{$SEL})`, "{{instance}} shard {{shard}} of {{shards}}")),
	}}
}

// shardSpread is max over mean of kcm_split_shard_objects grouped by the labels of by (a
// binary's shards of one layout and resource): 1 is even.
func shardSpread(by string) string {
	return fmt.Sprintf(`max by (%[1]s) (kcm_split_shard_objects{$SEL}) / (sum by (%[1]s) (kcm_split_shard_objects{$SEL}) / count by (%[1]s) (kcm_split_shard_objects{$SEL}))`, by)
}

// shardSection is the section of a binary that runs as shards (endpoints, quota): what each
// shard caches, how even that is, the largest namespace of each, and who filters.
func shardSection() section {
	return section{title: "Sharding (a shards value set)", panels: []panel{
		ts("Objects per shard", "short", 12,
			"Objects each shard's leader caches, by resource (its namespaces only; a standby caches nothing). Their sum is the cluster's.",
			q(`max by (shard, shards, resource) (kcm_split_shard_objects{$SEL})`, "{{resource}} shard {{shard}} of {{shards}}")),
		ts("Shard spread: max over mean objects", "short", 12,
			"The fullest shard's objects over the mean of the shards that lead, by resource: 1 is even; above 1.5 for an hour (at 100 objects or more per shard on average) KcmSplitShardImbalanced fires.",
			q(shardSpread("shards, resource"), "{{resource}} ({{shards}} shards)")),
		ts("Largest namespace of each shard, and the mean of a shard", "short", 12,
			"The largest namespace of each shard with its objects, and the mean objects of a shard (1/N of the total): a namespace above the mean is one no layout splits (KcmSplitShardNamespaceOversized). The namespace is exported_namespace when Prometheus keeps its own namespace target label (a ServiceMonitor without honorLabels), namespace with honorLabels.",
			q(`max by (shard, resource, exported_namespace, namespace) (kcm_split_shard_largest_namespace_objects{$SEL})`, "{{resource}} shard {{shard}}: {{exported_namespace}}"),
			q(`sum by (resource) (kcm_split_shard_objects{$SEL}) / count by (resource) (kcm_split_shard_objects{$SEL})`, "mean of a shard, {{resource}}")),
		{title: "Filtering mode by shard and resource", kind: "table", width: 12,
			desc:    "Who applies each shard's namespace range, per resource: server (the apiserver, gate ShardedListAndWatch on and the fnv hash: caches and wire carry the shard's objects only), client (the shard itself: the wire carries every object; always so with the default mixed hash), unknown (no list answered yet).",
			queries: []query{q(`max by (instance, shard, shards, resource, mode) (kcm_split_shard_info{$SEL}) == 1`, "")}},
	}}
}

// rateBy is the per-second rate of counter c summed by the labels of by (all when empty).
func rateBy(c, by, extra string) string {
	s := sel
	if extra != "" {
		s += ", " + extra
	}
	if by == "" {
		return fmt.Sprintf(`sum(rate(%s{%s}[%s]))`, c, s, rate)
	}
	return fmt.Sprintf(`sum by (%s) (rate(%s{%s}[%s]))`, by, c, s, rate)
}

// binaries are the controller binaries in the order of the chart's controllers.
var binaries = []binary{
	{
		alias: "endpoints", title: "Endpoints controller",
		controllers: []string{"endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller"},
		// The Endpoints part has no metrics of its own (upstream has none); the EndpointSlice
		// part has upstream's endpoint_slice_controller_*, the mirroring part upstream's
		// endpoint_slice_mirroring_controller_*.
		own: []section{{title: "EndpointSlices", panels: []panel{
			ts("EndpointSlice syncs by result", "ops", 12, "", q(rateBy("endpoint_slice_controller_syncs", "result", ""), "{{result}}")),
			ts("EndpointSlice writes by operation", "ops", 12, "", q(rateBy("endpoint_slice_controller_changes", "operation", ""), "{{operation}}")),
			ts("EndpointSlices: actual and desired, endpoints", "short", 12, "",
				q(`max(endpoint_slice_controller_num_endpoint_slices{$SEL})`, "slices"),
				q(`max(endpoint_slice_controller_desired_endpoint_slices{$SEL})`, "desired slices"),
				q(`max(endpoint_slice_controller_endpoints_desired{$SEL})`, "endpoints")),
			ts("Endpoints added and removed per sync p99", "short", 12, "",
				q(p99("endpoint_slice_controller_endpoints_added_per_sync", ""), "added"),
				q(p99("endpoint_slice_controller_endpoints_removed_per_sync", ""), "removed")),
			ts("Mirrored EndpointSlice writes by operation", "ops", 12, "", q(rateBy("endpoint_slice_mirroring_controller_changes", "operation", ""), "{{operation}}")),
			ts("Mirrored slices and endpoints, addresses skipped per sync p99", "short", 12, "",
				q(`max(endpoint_slice_mirroring_controller_num_endpoint_slices{$SEL})`, "slices"),
				q(`max(endpoint_slice_mirroring_controller_endpoints_desired{$SEL})`, "endpoints"),
				q(p99("endpoint_slice_mirroring_controller_addresses_skipped_per_sync", ""), "skipped p99")),
		}}, foreignAndLayout(), shardSection()},
	},
	{
		alias: "namespace", title: "Namespace controller",
		controllers: []string{"namespace-controller"},
		own: []section{{title: "Namespace deletion", panels: []panel{
			ts("Terminating namespaces", "short", 12, "", q(`max(kcm_split_namespace_terminating{$SEL})`, "terminating")),
			ts("Deletion duration (deletion timestamp to finalized)", "s", 12, "",
				q(strings.Replace(p99("kcm_split_namespace_deletion_duration_seconds", ""), "0.99", "0.5", 1), "p50"),
				q(p99("kcm_split_namespace_deletion_duration_seconds", ""), "p99")),
			ts("Objects deleted, top 10 resources", "ops", 12, "",
				q(`topk(10, `+rateBy("kcm_split_namespace_objects_deleted_total", "resource", "")+`)`, "{{resource}}")),
			ts("API group versions not answering discovery", "short", 12,
				"Group versions the latest discovery could not reach, by what their last successful discovery served: none (never discovered), holds_objects (a namespace's content may remain there: its deletion waits), holds_nothing.",
				q(`max by (last_discovery) (kcm_split_namespace_unavailable_group_versions{$SEL})`, "{{last_discovery}}")),
		}}},
	},
	{
		alias: "nodelifecycle", title: "Node lifecycle controller",
		controllers: []string{"node-lifecycle-controller", "taint-eviction-controller", "node-ipam-controller"},
		own: []section{
			{title: "Node lifecycle", panels: []panel{
				ts("Zone health (% of Ready Nodes)", "percent", 12, "", q(`max by (zone) (node_collector_zone_health{$SEL})`, "{{zone}}")),
				ts("Unhealthy Nodes and zone size", "short", 12, "",
					q(`max by (zone) (node_collector_unhealthy_nodes_in_zone{$SEL})`, "unhealthy {{zone}}"),
					q(`max by (zone) (node_collector_zone_size{$SEL})`, "size {{zone}}")),
				ts("Nodes tainted NoExecute (evictions) by zone", "ops", 12, "", q(rateBy("node_collector_evictions_total", "zone", ""), "{{zone}}")),
				ts("Zone eviction rate, paused evictions, suspected partition", "short", 12,
					"Evictions paused by zone and reason; 1 while Nodes that fell silent together are held as a partition of this controller (--partition-unknown-fraction).",
					q(`max by (zone) (kcm_split_nodelifecycle_zone_eviction_rate{$SEL})`, "rate {{zone}}"),
					q(`max by (zone, reason) (kcm_split_nodelifecycle_evictions_paused{$SEL})`, "paused {{zone}} {{reason}}"),
					q(`max(kcm_split_nodelifecycle_partition_suspected{$SEL})`, "partition suspected")),
				ts("Node health update duration p99", "s", 12, "",
					q(p99("node_collector_update_node_health_duration_seconds", ""), "one Node"),
					q(p99("node_collector_update_all_nodes_health_duration_seconds", ""), "all Nodes")),
				ts("Pods deleted by taint eviction", "ops", 12, "",
					q(rateBy("taint_eviction_controller_pod_deletions_total", "", ""), "deletions"),
					q(p99("taint_eviction_controller_pod_deletion_duration_seconds", ""), "p99 taint to deletion (s)")),
			}},
			{title: "Node IPAM (--allocate-node-cidrs)", panels: []panel{
				ts("Pod ranges in use (fraction) and Nodes waiting for one", "short", 12, "",
					q(`max by (clusterCIDR) (node_ipam_controller_cidrset_usage_cidrs{$SEL})`, "in use {{clusterCIDR}}"),
					q(`max(kcm_split_nodelifecycle_nodes_waiting_for_cidr{$SEL})`, "Nodes waiting")),
				ts("Pod ranges free and in all", "short", 12, "Free: ranges the allocator can still hand to new Nodes; all: the ranges a cluster CIDR holds.",
					q(`max by (clusterCIDR) (kcm_split_nodelifecycle_cidr_free_ranges{$SEL})`, "free {{clusterCIDR}}"),
					q(`max by (clusterCIDR) (node_ipam_controller_cirdset_max_cidrs{$SEL})`, "all {{clusterCIDR}}")),
				ts("Pod ranges taken and freed", "ops", 12, "",
					q(rateBy("node_ipam_controller_cidrset_cidrs_allocations_total", "clusterCIDR", ""), "taken {{clusterCIDR}}"),
					q(rateBy("node_ipam_controller_cidrset_cidrs_releases_total", "clusterCIDR", ""), "freed {{clusterCIDR}}")),
				ts("Tries per allocation p99 and claim collisions", "short", 12,
					"Collisions: ranges this allocator went to claim and found claimed by another allocator.",
					q(p99("node_ipam_controller_cidrset_allocation_tries_per_request", "clusterCIDR"), "tries p99 {{clusterCIDR}}"),
					q(rateBy("kcm_split_nodelifecycle_cidr_claim_collisions_total", "", ""), "collisions/s")),
			}},
		},
	},
	{
		alias: "pvbinder", title: "PersistentVolume binder",
		controllers: []string{"persistentvolume-binder-controller"},
		own: []section{{title: "Volumes and claims", panels: []panel{
			ts("Claim bind duration (created to Bound)", "s", 12, "",
				q(strings.Replace(p99("kcm_split_pvbinder_claim_bind_duration_seconds", ""), "0.99", "0.5", 1), "p50"),
				q(p99("kcm_split_pvbinder_claim_bind_duration_seconds", ""), "p99")),
			ts("Volume operation errors", "ops", 12, "Failed provision and delete attempts by plugin (volume_operation_errors_total).",
				q(rateBy("volume_operation_errors_total", "plugin_name, operation_name", ""), "{{operation_name}} {{plugin_name}}")),
			ts("Volumes by state", "short", 12, "",
				q(`sum by (storage_class) (pv_collector_bound_pv_count{$SEL})`, "bound {{storage_class}}"),
				q(`sum by (storage_class) (pv_collector_unbound_pv_count{$SEL})`, "unbound {{storage_class}}")),
			ts("Claims by state", "short", 12, "",
				q(`sum by (storage_class) (pv_collector_bound_pvc_count{$SEL})`, "bound {{storage_class}}"),
				q(`sum by (storage_class) (pv_collector_unbound_pvc_count{$SEL})`, "unbound {{storage_class}}")),
			ts("Retroactive StorageClass assignments", "ops", 12, "",
				q(rateBy("retroactive_storageclass_total", "", ""), "assigned"),
				q(rateBy("retroactive_storageclass_errors_total", "", ""), "failed")),
		}}},
	},
	{
		alias: "quota", title: "Resource quota controller",
		controllers: []string{"resourcequota-controller"},
		own: []section{{title: "Resource quotas", panels: []panel{
			ts("Quota syncs by outcome", "ops", 12, "", q(rateBy("kcm_split_quota_syncs_total", "outcome", ""), "{{outcome}}")),
			ts("Resource types that cannot be counted", "short", 12, "", q(`max(kcm_split_quota_uncountable_resource_types{$SEL})`, "uncountable")),
			ts("Usage staleness, 10 stalest quotas", "s", 24,
				"Seconds since a quota's usage was last counted in full. The quota's namespace is exported_namespace when Prometheus keeps its own namespace target label (a ServiceMonitor without honorLabels).",
				q(`topk(10, max by (exported_namespace, namespace, name) (kcm_split_quota_usage_staleness_seconds{$SEL}))`, "{{exported_namespace}}/{{name}}")),
		}}, foreignAndLayout(), shardSection()},
	},
	{
		alias: "servicelb", title: "LoadBalancer Service controller",
		controllers: []string{"service-lb-controller"},
		own: []section{{title: "LoadBalancer Services and pools", panels: []panel{
			ts("Load balancer syncs and node sync errors", "ops", 12, "",
				q(rateBy("service_controller_loadbalancer_sync_total", "", ""), "load balancer syncs"),
				q(rateBy("service_controller_nodesync_error_total", "", ""), "node sync errors")),
			ts("Node sync latency p99", "s", 12, "", q(p99("service_controller_nodesync_latency_seconds", ""), "p99")),
			ts("Services waiting for an address by pool and reason, eligible nodes", "short", 12, "",
				q(`max by (api, pool, reason) (kcm_split_servicelb_pending_services{$SEL})`, "waiting {{api}} {{pool}} {{reason}}"),
				q(`max(kcm_split_servicelb_eligible_nodes{$SEL})`, "eligible nodes")),
			ts("Pool addresses by pool and family", "short", 12, "",
				q(`max by (api, pool, family) (kcm_split_servicelb_addresses_assigned{$SEL})`, "assigned {{api}} {{pool}} {{family}}"),
				q(`max by (api, pool, family) (kcm_split_servicelb_addresses_available{$SEL})`, "available {{api}} {{pool}} {{family}}")),
			ts("Unverified addresses by pool", "short", 12,
				"Addresses Services hold that no pool vouches for now (the pool they were last vouched for; empty if unknown): kept, never released on missing information.",
				q(`max by (api, pool) (kcm_split_servicelb_unverified_addresses{$SEL})`, "{{api}} {{pool}}")),
			ts("Write and claim conflicts", "ops", 12, "Writes refused for a stale or overwritten object, and address claims found taken by another writer.",
				q(rateBy("kcm_split_servicelb_write_conflicts_total", "kind", ""), "write {{kind}}"),
				q(rateBy("kcm_split_servicelb_claim_conflicts_total", "", ""), "claim")),
		}}},
	},
}

// common are the sections every controller dashboard starts with.
func commonSections() []section {
	return []section{
		{title: "Replicas and leadership", panels: []panel{
			{title: "Replicas up", kind: "stat", width: 4, desc: "Replicas Prometheus scrapes successfully; a standby is up too.",
				queries: []query{q(`sum(up{$SEL})`, "up")}},
			ts("Leader (1) and standbys (0)", "short", 8, "leader_election_master_status: 1 for the replica holding the controller's Lease.",
				q(`max by (instance, name) (leader_election_master_status{$SEL})`, "{{instance}} ({{name}})")),
			ts("Leader terms and losses", "short", 6, "Terms started and terms lost while still meaning to lead, per window: more than one a window is flapping.",
				q(`sum by (name) (increase(kcm_split_leader_terms_total{$SEL}[$__rate_interval]))`, "terms {{name}}"),
				q(`sum by (name) (increase(kcm_split_leader_losses_total{$SEL}[$__rate_interval]))`, "losses {{name}}")),
			ts("Fenced writes by reason", "ops", 6, "Mutating requests refused inside the process because its Lease may have been taken.",
				q(rateBy("kcm_split_leader_fenced_writes_total", "name, reason", ""), "{{name}} {{reason}}")),
			ts("Leader Migration phase", "short", 24,
				"The phase each replica reports (1): off (Leader Migration not enabled), standby, waiting (leads its Lease, waits for the migration Lease's group), active, handing-back.",
				q(`max by (instance, phase) (kcm_split_leader_migration_phase{$SEL}) == 1`, "{{instance}} {{phase}}")),
		}},
		{title: "Reconciles", panels: []panel{
			ts("Reconciles by controller and result", "ops", 12, "success, error (retried with backoff), requeue, dropped (gave up after the retry cap), for each upstream controller the binary runs.",
				q(rateBy("kcm_split_reconcile_total", "controller, result", ""), "{{controller}} {{result}}")),
			ts("Reconcile duration p99 by controller", "s", 12, "",
				q(p99("kcm_split_reconcile_duration_seconds", "controller"), "{{controller}}")),
		}},
		{title: "Work queues", panels: []panel{
			ts("Depth", "short", 8, "", q(`sum by (name) (workqueue_depth{$SEL})`, "{{name}}")),
			ts("Adds", "ops", 8, "", q(rateBy("workqueue_adds_total", "name", ""), "{{name}}")),
			ts("Retries", "ops", 8, "", q(rateBy("workqueue_retries_total", "name", ""), "{{name}}")),
			ts("Queue latency p99 and mean", "s", 8,
				"How long a key waits before a worker takes it. The histogram's top bucket is 10 s (upstream's buckets), so the p99 cannot exceed 10 s; the mean (sum / count) has no such ceiling.",
				q(p99("workqueue_queue_duration_seconds", "name"), "p99 {{name}}"),
				q(`sum by (name) (rate(workqueue_queue_duration_seconds_sum{$SEL}[$__rate_interval])) / sum by (name) (rate(workqueue_queue_duration_seconds_count{$SEL}[$__rate_interval]))`, "mean {{name}}")),
			ts("Keys that waited over 10 s", "ops", 8, "Keys per second whose wait went past the histogram's top bucket (10 s; le is \"10.0\" since Prometheus 3, \"10\" before).",
				q(`sum by (name) (rate(workqueue_queue_duration_seconds_count{$SEL}[$__rate_interval])) - sum by (name) (rate(workqueue_queue_duration_seconds_bucket{$SEL, le=~"10|10.0"}[$__rate_interval]))`, "{{name}}")),
			ts("Work duration p99", "s", 8, "", q(p99("workqueue_work_duration_seconds", "name"), "{{name}}")),
			ts("Longest running / unfinished work", "s", 24, "A value that keeps growing means a stuck worker.",
				q(`max by (name) (workqueue_longest_running_processor_seconds{$SEL})`, "longest {{name}}"),
				q(`max by (name) (workqueue_unfinished_work_seconds{$SEL})`, "unfinished {{name}}")),
		}},
		{title: "API server requests and secure port", panels: []panel{
			ts("Requests by code", "reqps", 8, "", q(rateBy("rest_client_requests_total", "code", ""), "{{code}}")),
			ts("Request latency p99 by verb", "s", 8, "", q(p99("rest_client_request_duration_seconds", "verb"), "{{verb}}")),
			ts("Client-side throttling p99", "s", 8, "Time requests waited for --kube-api-qps/--kube-api-burst.",
				q(p99("rest_client_rate_limiter_duration_seconds", "verb"), "{{verb}}")),
			ts("Secure port: requests refused (401, 403)", "reqps", 12, "Requests to /metrics (and other protected paths) without a valid token (401) or without the metrics-reader rights (403): a scraper misconfigured or a probe.",
				q(rateBy("kcm_split_secure_serving_requests_total", "instance, decision", `decision=~"unauthenticated|forbidden"`), "{{instance}} {{decision}}")),
			ts("Secure port: requests by decision", "reqps", 12, "",
				q(rateBy("kcm_split_secure_serving_requests_total", "decision", ""), "{{decision}}")),
		}},
		{title: "Process", panels: []panel{
			ts("CPU", "percentunit", 8, "", q(`rate(process_cpu_seconds_total{$SEL}[$__rate_interval])`, "{{instance}}")),
			ts("Memory", "bytes", 8, "",
				q(`process_resident_memory_bytes{$SEL}`, "RSS {{instance}}"),
				q(`go_memstats_heap_inuse_bytes{$SEL}`, "heap {{instance}}")),
			ts("Goroutines", "short", 8, "", q(`go_goroutines{$SEL}`, "{{instance}}")),
		}},
	}
}

// overviewSections are the overview's: every binary side by side.
func overviewSections() []section {
	return []section{
		{title: "Controllers", panels: []panel{
			{title: "Replicas and their Leases", kind: "table", width: 12, desc: "One row per replica: its job, instance, Lease and whether it leads (1).",
				queries: []query{q(`max by (job, instance, name) (leader_election_master_status{$SEL})`, "")}},
			ts("Leaders per Lease", "short", 6, "Should be 1 for each Lease: 0 means no replica leads, 2 a split brain.",
				q(`sum by (name) (leader_election_master_status{$SEL})`, "{{name}}")),
			ts("Replicas up", "short", 6, "", q(`sum by (job) (up{$SEL})`, "{{job}}")),
			ts("Leader terms and losses by Lease", "short", 12, "",
				q(`sum by (name) (increase(kcm_split_leader_terms_total{$SEL}[$__rate_interval]))`, "terms {{name}}"),
				q(`sum by (name) (increase(kcm_split_leader_losses_total{$SEL}[$__rate_interval]))`, "losses {{name}}")),
			ts("Fenced writes by Lease and reason", "ops", 12, "", q(rateBy("kcm_split_leader_fenced_writes_total", "name, reason", ""), "{{name}} {{reason}}")),
		}},
		{title: "Moving from kube-controller-manager", panels: []panel{
			ts("Take-over: proven, and kube-controller-manager running the controllers", "short", 8,
				"Binaries started with --take-over-from-kcm only. proven: 1 while kube-controller-manager provably runs none of the binary's controllers (they run), 0 while the leader waits. KCM runs them: 1 while a kube-controller-manager Pod's --controllers run one, 0 while none does, -1 unknown (or no replica has led yet). 1 after a lapse is the trap (KcmSplitKubeControllerManagerRunsAgain).",
				q(`max by (job) (kcm_split_takeover_proven{$SEL})`, "proven {{job}}"),
				q(`max by (job) (kcm_split_takeover_kcm_runs_controllers{$SEL})`, "KCM runs them {{job}}")),
			ts("Take-over lapses", "short", 8,
				"Binaries started with --take-over-from-kcm only: times the proof stopped holding while the controllers ran on it, per window (they stopped, their writes refused, and wait for the proof again).",
				q(`sum by (job) (increase(kcm_split_takeover_lapses_total{$SEL}[$__rate_interval]))`, "{{job}}")),
			{title: "Leader Migration phase by replica", kind: "table", width: 8, desc: "One row per replica and the phase it reports: off (Leader Migration not enabled), standby, waiting, active, handing-back.",
				queries: []query{q(`max by (job, instance, phase) (kcm_split_leader_migration_phase{$SEL}) == 1`, "")}},
			ts("Foreign writer episodes", "short", 12,
				"Episodes in which another field manager (kube-controller-manager still running a controller, a hand edit) wrote fields a controller owns (endpoints, quota, namespace, nodelifecycle and pvbinder controllers); ForeignWriterDetected Events name it.",
				q(`sum by (job, controller) (increase(kcm_split_foreign_writer_detected_total{$SEL}[$__rate_interval]))`, "{{job}} {{controller}}")),
		}},
		{title: "Sharding (endpoints and quota with a shards value)", panels: []panel{
			ts("Shard spread by binary: max over mean objects", "short", 8,
				"For each sharded binary and resource, the fullest shard's objects over the mean of its shards that lead: 1 is even; above 1.5 for an hour KcmSplitShardImbalanced fires. The binary's dashboard has each shard and its largest namespace.",
				q(shardSpread("binary, shards, resource"), "{{binary}} {{resource}} ({{shards}} shards)")),
			ts("Shard layouts: Leases of another layout blocking", "short", 8,
				"Sharded replicas only (a shards value set), by binary, shard and shard count: Leases of another layout (shard count or hash) held and fresh; above 0 the replica starts nothing until that layout is gone (a layout change in progress; KcmSplitShardLayoutBlocked after 15 minutes). -1 before the Leases are listed.",
				q(`max by (binary, shard, shards) (kcm_split_shard_layout_blocking_leases{$SEL})`, "{{binary}} shard {{shard}} of {{shards}}")),
			{title: "Shard filtering mode by binary and resource", kind: "table", width: 8,
				desc:    "Who applies each shard's namespace range: server (the apiserver), client (the shard itself; always so with the default mixed hash), unknown (no list answered yet).",
				queries: []query{q(`max by (binary, shard, shards, resource, mode) (kcm_split_shard_info{$SEL}) == 1`, "")}},
		}},
		{title: "Reconciles", panels: []panel{
			ts("Reconcile rate", "ops", 8, "", q(rateBy("kcm_split_reconcile_total", "controller", ""), "{{controller}}")),
			ts("Reconcile errors and drops", "ops", 8, "", q(rateBy("kcm_split_reconcile_total", "controller, result", `result=~"error|dropped"`), "{{controller}} {{result}}")),
			ts("Reconcile duration p99", "s", 8, "", q(p99("kcm_split_reconcile_duration_seconds", "controller"), "{{controller}}")),
		}},
		{title: "Work queues, API and secure port", panels: []panel{
			ts("Queue depth", "short", 6, "", q(`sum by (name) (workqueue_depth{$SEL})`, "{{name}}")),
			ts("Queue latency p99", "s", 6, "Capped at 10 s, the top bucket; the controller dashboards also show the mean.",
				q(p99("workqueue_queue_duration_seconds", "name"), "{{name}}")),
			ts("API requests by controller and code", "reqps", 6, "", q(rateBy("rest_client_requests_total", "job, code", ""), "{{job}} {{code}}")),
			ts("Secure port refusals (401, 403)", "reqps", 6, "",
				q(rateBy("kcm_split_secure_serving_requests_total", "job, decision", `decision=~"unauthenticated|forbidden"`), "{{job}} {{decision}}")),
		}},
		{title: "Resources", panels: []panel{
			ts("CPU", "percentunit", 8, "", q(rateBy("process_cpu_seconds_total", "job", ""), "{{job}}")),
			ts("Memory (RSS)", "bytes", 8, "", q(`sum by (job) (process_resident_memory_bytes{$SEL})`, "{{job}}")),
			ts("Goroutines", "short", 8, "", q(`sum by (job) (go_goroutines{$SEL})`, "{{job}}")),
		}},
	}
}

func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
}

// variables are datasource, cluster, job and instance. jobQuery finds the dashboard's jobs;
// multiJob lets the overview pick several.
func variables(jobQuery string, multiJob bool) []cog.Builder[dashboard.VariableModel] {
	str := func(s string) dashboard.StringOrMap { return dashboard.StringOrMap{String: cog.ToPtr(s)} }
	all := dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}}
	cluster := `label_values(kcm_split_reconcile_total, cluster)`
	instance := `label_values(up{cluster=~"$cluster", job=~"$job"}, instance)`
	job := dashboard.NewQueryVariableBuilder("job").Label("Job").Datasource(datasource()).
		Query(str(jobQuery)).Definition(jobQuery).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc)
	if multiJob {
		job = job.Multi(true).IncludeAll(true).Current(all)
	}
	return []cog.Builder[dashboard.VariableModel]{
		dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"),
		// A single Prometheus has no cluster label: All (.*) then matches the empty value.
		dashboard.NewQueryVariableBuilder("cluster").Label("Cluster").Datasource(datasource()).
			Query(str(cluster)).Definition(cluster).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).IncludeAll(true).AllValue(".*").Current(all),
		job,
		dashboard.NewQueryVariableBuilder("instance").Label("Instance").Datasource(datasource()).
			Query(str(instance)).Definition(instance).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).Multi(true).IncludeAll(true).AllValue(".*").Current(all),
	}
}

// build lays sections out on a dashboard; selector replaces $SEL in every query.
func build(uid, title string, tags []string, vars []cog.Builder[dashboard.VariableModel], selector string, sections []section) (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder(title).Uid(uid).Tags(tags).Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).Refresh("30s").Time("now-1h", "now").Timezone("").
		Link(dashboard.NewDashboardLinkBuilder("kcm-split").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{Tag}).AsDropdown(true).IncludeVars(true).KeepTime(true))
	for _, v := range vars {
		b = b.WithVariable(v)
	}
	id := uint32(1)
	for _, s := range sections {
		b = b.WithRow(dashboard.NewRowBuilder(s.title).Id(id))
		id++
		for _, p := range s.panels {
			targets := make([]cog.Builder[variants.Dataquery], 0, len(p.queries))
			for i, qq := range p.queries {
				t := prometheus.NewDataqueryBuilder().Expr(strings.ReplaceAll(qq.expr, sel, selector)).
					LegendFormat(qq.legend).RefId(string(rune('A' + i))).Datasource(datasource())
				if p.kind == "table" {
					t = t.Instant().Format(prometheus.PromQueryFormatTable)
				} else {
					t = t.Range()
				}
				targets = append(targets, t)
			}
			var pb cog.Builder[dashboard.Panel]
			switch p.kind {
			case "stat":
				pb = stat.NewPanelBuilder().Id(id).Title(p.title).Description(p.desc).Datasource(datasource()).
					Span(p.width).Height(8).Targets(targets).Unit(p.unit).GraphMode(common.BigValueGraphModeNone).
					ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
			case "table":
				pb = table.NewPanelBuilder().Id(id).Title(p.title).Description(p.desc).Datasource(datasource()).
					Span(p.width).Height(8).Targets(targets)
			default:
				pb = timeseries.NewPanelBuilder().Id(id).Title(p.title).Description(p.desc).Datasource(datasource()).
					Span(p.width).Height(8).Targets(targets).Unit(p.unit).
					Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).
						Placement(common.LegendPlacementBottom).ShowLegend(true)).
					Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
			}
			b = b.WithPanel(pb)
			id++
		}
	}
	return b.Build()
}

// Generate returns every dashboard's JSON by file name.
func Generate() (map[string][]byte, error) {
	out := map[string][]byte{}
	add := func(name string, d dashboard.Dashboard, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // PromQL's < > & stay readable
		enc.SetIndent("", "  ")
		if err := enc.Encode(d); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out[name] = buf.Bytes()
		return nil
	}
	for _, bin := range binaries {
		jobQuery := fmt.Sprintf(`label_values(kcm_split_reconcile_total{cluster=~"$cluster", controller=~"%s"}, job)`, strings.Join(bin.controllers, "|"))
		d, err := build("kcm-split-"+bin.alias, "kcm-split / "+bin.title, append([]string{Tag}, bin.controllers...),
			variables(jobQuery, false), `cluster=~"$cluster", job="$job", instance=~"$instance"`, append(commonSections(), bin.own...))
		if err := add(bin.alias+".json", d, err); err != nil {
			return nil, err
		}
	}
	d, err := build("kcm-split-overview", "kcm-split / Overview", []string{Tag},
		variables(`label_values(kcm_split_reconcile_total{cluster=~"$cluster"}, job)`, true),
		`cluster=~"$cluster", job=~"$job", instance=~"$instance"`, overviewSections())
	if err := add("overview.json", d, err); err != nil {
		return nil, err
	}
	return out, nil
}
