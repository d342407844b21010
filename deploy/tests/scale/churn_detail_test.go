package scale

import "testing"

// TestChurnDetail reads two metrics pages of a shard as the harness does around a churn and
// checks the summary: request deltas by method and code, reconciles by result, delayed adds,
// and the waits over 1 s, per workqueue too.
func TestChurnDetail(t *testing.T) {
	before := parseShardWaits(`# HELP rest_client_requests_total Number of HTTP requests.
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PUT"} 10
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 4
workqueue_retries_total{name="endpoint"} 1
process_cpu_seconds_total 12.25
kcm_split_reconcile_total{controller="endpoints",result="success"} 5
kcm_split_reconcile_total{controller="endpoints",result="error"} 0
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PUT",le="0.5"} 9
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PUT",le="1"} 10
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PUT",le="+Inf"} 10
rest_client_rate_limiter_duration_seconds_sum{host="h",verb="PUT"} 2.5
rest_client_rate_limiter_duration_seconds_count{host="h",verb="PUT"} 10
workqueue_queue_duration_seconds_bucket{name="endpoint",le="1"} 5
workqueue_queue_duration_seconds_bucket{name="endpoint",le="10"} 5
workqueue_queue_duration_seconds_sum{name="endpoint"} 0.5
workqueue_queue_duration_seconds_count{name="endpoint"} 5
`)
	after := parseShardWaits(`rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PUT"} 30
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PUT"} 2
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 4
workqueue_retries_total{name="endpoint"} 3
process_cpu_seconds_total 15.75
kcm_split_reconcile_total{controller="endpoints",result="success"} 25
kcm_split_reconcile_total{controller="endpoints",result="error"} 2
kcm_split_reconcile_total{controller="endpointslice",result="success"} 7
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PUT",le="1"} 28
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PUT",le="10"} 32
rest_client_rate_limiter_duration_seconds_sum{host="h",verb="PUT"} 13.5
rest_client_rate_limiter_duration_seconds_count{host="h",verb="PUT"} 32
workqueue_queue_duration_seconds_bucket{name="endpoint",le="1"} 20
workqueue_queue_duration_seconds_sum{name="endpoint"} 9.5
workqueue_queue_duration_seconds_count{name="endpoint"} 23
workqueue_queue_duration_seconds_bucket{name="endpoint_slice",le="1"} 7
workqueue_queue_duration_seconds_sum{name="endpoint_slice"} 0.1
workqueue_queue_duration_seconds_count{name="endpoint_slice"} 7
`)
	want := "requests PUT 200:20 PUT 409:2, reconciles error:2 success:27, delayed adds 2, cpu 3.5 s, rate_limiter>1s 4/22, queue>1s 3/25 (endpoint:3/18 endpoint_slice:0/7), work>1s 0/0"
	if got := churnDetail(before, after); got != want {
		t.Errorf("churnDetail:\n got %s\nwant %s", got, want)
	}
	if got := meanWaitMs(before, after, "rest_client_rate_limiter_duration_seconds"); got != 500 {
		t.Errorf("mean rate-limiter wait: got %v ms, want 500", got)
	}
}
