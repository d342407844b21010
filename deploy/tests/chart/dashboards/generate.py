#!/usr/bin/env python3
"""Writes charts/kcm-split/dashboards/<alias>.json and overview.json.

Every controller dashboard has the same sections (up, leader, reconciles, work queues, API
requests, process) filtered by the controller's job, queue names and controller label, plus
a section for the controller's own metrics. To add a controller: add an entry to CONTROLLERS,
run `python3 deploy/tests/chart/dashboards/generate.py`, commit the new JSON. The JSON files are
what the chart ships; deploy/tests/chart checks them (PromQL parses, every metric is one the
binary exports).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "..", "..", "charts", "kcm-split", "dashboards")

# alias -> controller ID (binary, reconcile label), upstream queue names, own panels
# (title, unit, [(expr, legend)]).
CONTROLLERS = {
    "endpoints": {
        "id": "endpoints-controller",
        "title": "Endpoints controller",
        "queues": ["endpoint", "endpoint_slice", "endpoint_slice_mirroring"],
        # The Endpoints part has no metrics of its own (upstream has none); the EndpointSlice
        # part has upstream's endpoint_slice_controller_* (its reconciles have the
        # controller="endpointslice-controller" label), the mirroring part upstream's
        # endpoint_slice_mirroring_controller_* (controller="endpointslice-mirroring-controller").
        "own": [
            ("EndpointSlice syncs by result", "ops", [
                ('sum by (result) (rate(endpoint_slice_controller_syncs{$JOB}[$__rate_interval]))', "{{result}}")]),
            ("EndpointSlice writes by operation", "ops", [
                ('sum by (operation) (rate(endpoint_slice_controller_changes{$JOB}[$__rate_interval]))', "{{operation}}")]),
            ("EndpointSlices: actual and desired, endpoints", "short", [
                ('max(endpoint_slice_controller_num_endpoint_slices{$JOB})', "slices"),
                ('max(endpoint_slice_controller_desired_endpoint_slices{$JOB})', "desired slices"),
                ('max(endpoint_slice_controller_endpoints_desired{$JOB})', "endpoints")]),
            ("Endpoints added and removed per sync p99", "short", [
                ('histogram_quantile(0.99, sum by (le) (rate(endpoint_slice_controller_endpoints_added_per_sync_bucket{$JOB}[$__rate_interval])))', "added"),
                ('histogram_quantile(0.99, sum by (le) (rate(endpoint_slice_controller_endpoints_removed_per_sync_bucket{$JOB}[$__rate_interval])))', "removed")]),
            ("Mirrored EndpointSlice writes by operation", "ops", [
                ('sum by (operation) (rate(endpoint_slice_mirroring_controller_changes{$JOB}[$__rate_interval]))', "{{operation}}")]),
            ("Mirrored slices and endpoints, addresses skipped per sync p99", "short", [
                ('max(endpoint_slice_mirroring_controller_num_endpoint_slices{$JOB})', "slices"),
                ('max(endpoint_slice_mirroring_controller_endpoints_desired{$JOB})', "endpoints"),
                ('histogram_quantile(0.99, sum by (le) (rate(endpoint_slice_mirroring_controller_addresses_skipped_per_sync_bucket{$JOB}[$__rate_interval])))', "skipped p99")]),
        ],
    },
    "namespace": {
        "id": "namespace-controller",
        "title": "Namespace controller",
        "queues": ["namespace"],
        "own": [
            ("Terminating namespaces", "short", [
                ('max(kcm_split_namespace_terminating{$JOB})', "terminating")]),
            ("Deletion duration (deletion timestamp to finalized)", "s", [
                ('histogram_quantile(0.5, sum by (le) (rate(kcm_split_namespace_deletion_duration_seconds_bucket{$JOB}[$__rate_interval])))', "p50"),
                ('histogram_quantile(0.99, sum by (le) (rate(kcm_split_namespace_deletion_duration_seconds_bucket{$JOB}[$__rate_interval])))', "p99")]),
            ("Objects deleted, top 10 resources", "ops", [
                ('topk(10, sum by (resource) (rate(kcm_split_namespace_objects_deleted_total{$JOB}[$__rate_interval])))', "{{resource}}")]),
        ],
    },
    "nodelifecycle": {
        "id": "nodelifecycle-controller",
        "title": "Node lifecycle controller",
        "queues": ["node_lifecycle_controller", "node_lifecycle_controller_pods",
                   "noexec_taint_node", "noexec_taint_pod", "noexec_taint_eviction"],
        "own": [
            ("Zone health (% of Ready Nodes)", "percent", [
                ('max by (zone) (node_collector_zone_health{$JOB})', "{{zone}}")]),
            ("Unhealthy Nodes and zone size", "short", [
                ('max by (zone) (node_collector_unhealthy_nodes_in_zone{$JOB})', "unhealthy {{zone}}"),
                ('max by (zone) (node_collector_zone_size{$JOB})', "size {{zone}}")]),
            ("Nodes tainted NoExecute (evictions) by zone", "ops", [
                ('sum by (zone) (rate(node_collector_evictions_total{$JOB}[$__rate_interval]))', "{{zone}}")]),
            ("Zone eviction rate and paused evictions", "short", [
                ('max by (zone) (kcm_split_nodelifecycle_zone_eviction_rate{$JOB})', "rate {{zone}}"),
                ('max by (zone, reason) (kcm_split_nodelifecycle_evictions_paused{$JOB})', "paused {{zone}} {{reason}}")]),
            ("Node health update duration p99", "s", [
                ('histogram_quantile(0.99, sum by (le) (rate(node_collector_update_node_health_duration_seconds_bucket{$JOB}[$__rate_interval])))', "one Node"),
                ('histogram_quantile(0.99, sum by (le) (rate(node_collector_update_all_nodes_health_duration_seconds_bucket{$JOB}[$__rate_interval])))', "all Nodes")]),
            ("Pods deleted by taint eviction", "ops", [
                ('sum(rate(taint_eviction_controller_pod_deletions_total{$JOB}[$__rate_interval]))', "deletions"),
                ('histogram_quantile(0.99, sum by (le) (rate(taint_eviction_controller_pod_deletion_duration_seconds_bucket{$JOB}[$__rate_interval])))', "p99 taint to deletion (s)")]),
            ("Node IPAM: Pod ranges in use (fraction) and Nodes waiting for one", "short", [
                ('max by (clusterCIDR) (node_ipam_controller_cidrset_usage_cidrs{$JOB})', "in use {{clusterCIDR}}"),
                ('max(kcm_split_nodelifecycle_nodes_waiting_for_cidr{$JOB})', "Nodes waiting")]),
            ("Node IPAM: ranges taken and freed", "ops", [
                ('sum by (clusterCIDR) (rate(node_ipam_controller_cidrset_cidrs_allocations_total{$JOB}[$__rate_interval]))', "taken {{clusterCIDR}}"),
                ('sum by (clusterCIDR) (rate(node_ipam_controller_cidrset_cidrs_releases_total{$JOB}[$__rate_interval]))', "freed {{clusterCIDR}}")]),
        ],
    },
    "pvbinder": {
        "id": "pv-binder-controller",
        "title": "PersistentVolume binder",
        "queues": ["volumes", "claims"],
        "own": [
            ("Claim bind duration (created to Bound)", "s", [
                ('histogram_quantile(0.5, sum by (le) (rate(kcm_split_pvbinder_claim_bind_duration_seconds_bucket{$JOB}[$__rate_interval])))', "p50"),
                ('histogram_quantile(0.99, sum by (le) (rate(kcm_split_pvbinder_claim_bind_duration_seconds_bucket{$JOB}[$__rate_interval])))', "p99")]),
            ("Volumes by state", "short", [
                ('sum by (storage_class) (pv_collector_bound_pv_count{$JOB})', "bound {{storage_class}}"),
                ('sum by (storage_class) (pv_collector_unbound_pv_count{$JOB})', "unbound {{storage_class}}")]),
            ("Claims by state", "short", [
                ('sum by (storage_class) (pv_collector_bound_pvc_count{$JOB})', "bound {{storage_class}}"),
                ('sum by (storage_class) (pv_collector_unbound_pvc_count{$JOB})', "unbound {{storage_class}}")]),
            ("Retroactive StorageClass assignments", "ops", [
                ('sum(rate(retroactive_storageclass_total{$JOB}[$__rate_interval]))', "assigned"),
                ('sum(rate(retroactive_storageclass_errors_total{$JOB}[$__rate_interval]))', "failed")]),
        ],
    },
    "quota": {
        "id": "quota-controller",
        "title": "Resource quota controller",
        "queues": ["resourcequota_primary", "resourcequota_priority"],
        "own": [
            ("Quota syncs by outcome", "ops", [
                ('sum by (outcome) (rate(kcm_split_quota_syncs_total{$JOB}[$__rate_interval]))', "{{outcome}}")]),
            ("Resource types that cannot be counted", "short", [
                ('max(kcm_split_quota_uncountable_resource_types{$JOB})', "uncountable")]),
        ],
    },
    "servicelb": {
        "id": "service-lb-controller",
        "title": "LoadBalancer Service controller",
        "queues": ["service", "node", "ipaddresspool"],
        "own": [
            ("Load balancer syncs and node sync errors", "ops", [
                ('sum(rate(service_controller_loadbalancer_sync_total{$JOB}[$__rate_interval]))', "load balancer syncs"),
                ('sum(rate(service_controller_nodesync_error_total{$JOB}[$__rate_interval]))', "node sync errors")]),
            ("Node sync latency p99", "s", [
                ('histogram_quantile(0.99, sum by (le) (rate(service_controller_nodesync_latency_seconds_bucket{$JOB}[$__rate_interval])))', "p99")]),
            ("Services waiting for an address, eligible nodes", "short", [
                ('max(kcm_split_servicelb_pending_services{$JOB})', "pending Services"),
                ('max(kcm_split_servicelb_eligible_nodes{$JOB})', "eligible nodes")]),
            ("Pool addresses by family", "short", [
                ('max by (family) (kcm_split_servicelb_addresses_assigned{$JOB})', "assigned {{family}}"),
                ('max by (family) (kcm_split_servicelb_addresses_available{$JOB})', "available {{family}}")]),
        ],
    },
}

RATE = "$__rate_interval"


def target(expr, legend, ref):
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr,
            "legendFormat": legend, "refId": ref, "range": True}


class Layout:
    """Places panels on Grafana's 24-column grid, left to right, rows of height 8."""

    def __init__(self):
        self.panels, self.y, self.x, self.next_id = [], 0, 0, 1

    def row(self, title):
        if self.x:
            self.y, self.x = self.y + 8, 0
        self.panels.append({"type": "row", "title": title, "collapsed": False, "id": self.next_id,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.next_id += 1
        self.y += 1

    def panel(self, title, queries, unit="short", kind="timeseries", w=8, desc=""):
        if self.x + w > 24:
            self.y, self.x = self.y + 8, 0
        p = {
            "type": kind, "title": title, "id": self.next_id, "description": desc,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": w, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(queries)],
        }
        if kind == "stat":
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "colorMode": "value", "graphMode": "none", "textMode": "auto"}
        self.panels.append(p)
        self.next_id += 1
        self.x += w


def variables(job_query):
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1, "regex": ""},
        {"name": "job", "label": "Job", "type": "query",
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": {"query": job_query, "refId": "job"}, "definition": job_query,
         "current": {}, "hide": 0, "refresh": 2, "sort": 1, "multi": False, "includeAll": False, "regex": ""},
    ]}


def dashboard(uid, title, panels, templating, tags):
    return {
        "uid": uid, "title": title, "tags": tags, "editable": True, "graphTooltip": 1,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "timezone": "",
        "time": {"from": "now-1h", "to": "now"}, "timepicker": {},
        "annotations": {"list": []}, "links": [], "templating": templating, "panels": panels,
    }


def controller_dashboard(alias, c):
    job = 'job="$job"'
    ctl = f'{job}, controller="{c["id"]}"'
    q = f'{job}, name=~"{"|".join(c["queues"])}"'
    L = Layout()
    L.row("Replicas and leadership")
    L.panel("Replicas up", [(f'sum(up{{{job}}})', "up")], kind="stat", w=6,
            desc="Replicas Prometheus scrapes successfully; a standby is up too.")
    L.panel("Leader", [(f'max by (instance, name) (leader_election_master_status{{{job}}})', "{{instance}} ({{name}})")],
            w=18, desc="1 for the replica holding the controller's Lease, 0 for standbys.")
    L.row("Reconciles")
    L.panel("Reconcile rate by result", [(f'sum by (result) (rate(kcm_split_reconcile_total{{{ctl}}}[{RATE}]))', "{{result}}")],
            unit="ops", w=12, desc="success, error (retried with backoff), requeue, dropped (gave up after the retry cap).")
    L.panel("Reconcile duration p99", [(f'histogram_quantile(0.99, sum by (le) (rate(kcm_split_reconcile_duration_seconds_bucket{{{ctl}}}[{RATE}])))', "p99")],
            unit="s", w=12)
    L.row("Work queues")
    L.panel("Depth", [(f'sum by (name) (workqueue_depth{{{q}}})', "{{name}}")], w=8)
    L.panel("Adds", [(f'sum by (name) (rate(workqueue_adds_total{{{q}}}[{RATE}]))', "{{name}}")], unit="ops", w=8)
    L.panel("Retries", [(f'sum by (name) (rate(workqueue_retries_total{{{q}}}[{RATE}]))', "{{name}}")], unit="ops", w=8)
    L.panel("Queue latency p99", [(f'histogram_quantile(0.99, sum by (name, le) (rate(workqueue_queue_duration_seconds_bucket{{{q}}}[{RATE}])))', "{{name}}")],
            unit="s", w=8, desc="How long a key waits in the queue before a worker takes it.")
    L.panel("Work duration p99", [(f'histogram_quantile(0.99, sum by (name, le) (rate(workqueue_work_duration_seconds_bucket{{{q}}}[{RATE}])))', "{{name}}")],
            unit="s", w=8)
    L.panel("Longest running / unfinished work", [
        (f'max by (name) (workqueue_longest_running_processor_seconds{{{q}}})', "longest {{name}}"),
        (f'max by (name) (workqueue_unfinished_work_seconds{{{q}}})', "unfinished {{name}}")], unit="s", w=8,
        desc="A value that keeps growing means a stuck worker.")
    L.row("API server requests")
    L.panel("Requests by code", [(f'sum by (code) (rate(rest_client_requests_total{{{job}}}[{RATE}]))', "{{code}}")], unit="reqps", w=8)
    L.panel("Request latency p99 by verb", [(f'histogram_quantile(0.99, sum by (verb, le) (rate(rest_client_request_duration_seconds_bucket{{{job}}}[{RATE}])))', "{{verb}}")],
            unit="s", w=8)
    L.panel("Client-side throttling p99", [(f'histogram_quantile(0.99, sum by (verb, le) (rate(rest_client_rate_limiter_duration_seconds_bucket{{{job}}}[{RATE}])))', "{{verb}}")],
            unit="s", w=8, desc="Time requests waited for --kube-api-qps/--kube-api-burst.")
    L.row("Process")
    L.panel("CPU", [(f'rate(process_cpu_seconds_total{{{job}}}[{RATE}])', "{{instance}}")], unit="percentunit", w=8)
    L.panel("Memory", [(f'process_resident_memory_bytes{{{job}}}', "RSS {{instance}}"),
                       (f'go_memstats_heap_inuse_bytes{{{job}}}', "heap {{instance}}")], unit="bytes", w=8)
    L.panel("Goroutines", [(f'go_goroutines{{{job}}}', "{{instance}}")], w=8)
    if c["own"]:
        L.row(c["title"])
        for title, unit, queries in c["own"]:
            L.panel(title, [(e.replace("{$JOB}", "{" + job + "}"), l) for e, l in queries], unit=unit, w=12)
    job_query = f'label_values(workqueue_adds_total{{name="{c["queues"][0]}"}}, job)'
    return dashboard(f"kcm-split-{alias}", f"kcm-split / {c['title']}", L.panels, variables(job_query),
                     ["kcm-split", c["id"]])


def overview():
    job = 'job=~"$job"'
    L = Layout()
    L.row("Controllers")
    L.panel("Replicas per controller", [(f'count by (job) (leader_election_master_status{{{job}}})', "{{job}}")], w=8,
            desc="Replicas reporting, leader and standbys.")
    L.panel("Leaders per Lease", [(f'sum by (name) (leader_election_master_status{{{job}}})', "{{name}}")], w=8,
            desc="Should be 1 for each Lease: 0 means no replica leads.")
    L.panel("Replicas up", [(f'sum by (job) (up{{{job}}})', "{{job}}")], w=8)
    L.row("Reconciles")
    L.panel("Reconcile rate", [(f'sum by (controller) (rate(kcm_split_reconcile_total{{{job}}}[{RATE}]))', "{{controller}}")], unit="ops", w=8)
    L.panel("Reconcile errors and drops", [(f'sum by (controller, result) (rate(kcm_split_reconcile_total{{{job}, result=~"error|dropped"}}[{RATE}]))', "{{controller}} {{result}}")],
            unit="ops", w=8)
    L.panel("Reconcile duration p99", [(f'histogram_quantile(0.99, sum by (controller, le) (rate(kcm_split_reconcile_duration_seconds_bucket{{{job}}}[{RATE}])))', "{{controller}}")],
            unit="s", w=8)
    L.row("Work queues and API")
    L.panel("Queue depth", [(f'sum by (name) (workqueue_depth{{{job}}})', "{{name}}")], w=8)
    L.panel("Queue latency p99", [(f'histogram_quantile(0.99, sum by (name, le) (rate(workqueue_queue_duration_seconds_bucket{{{job}}}[{RATE}])))', "{{name}}")], unit="s", w=8)
    L.panel("API requests by controller and code", [(f'sum by (job, code) (rate(rest_client_requests_total{{{job}}}[{RATE}]))', "{{job}} {{code}}")], unit="reqps", w=8)
    L.row("Resources")
    L.panel("CPU", [(f'sum by (job) (rate(process_cpu_seconds_total{{{job}}}[{RATE}]))', "{{job}}")], unit="percentunit", w=8)
    L.panel("Memory (RSS)", [(f'sum by (job) (process_resident_memory_bytes{{{job}}})', "{{job}}")], unit="bytes", w=8)
    L.panel("Goroutines", [(f'sum by (job) (go_goroutines{{{job}}})', "{{job}}")], w=8)
    t = variables("label_values(kcm_split_reconcile_duration_seconds_count, job)")
    t["list"][1].update({"multi": True, "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"}})
    return dashboard("kcm-split-overview", "kcm-split / Overview", L.panels, t, ["kcm-split"])


def write(name, d):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    for alias, c in CONTROLLERS.items():
        write(alias + ".json", controller_dashboard(alias, c))
    write("overview.json", overview())
