package nodelifecycle

import v1 "k8s.io/api/core/v1"

// betaLabels pairs each stable Node label with its deprecated beta twin, which upstream's node
// lifecycle controller keeps (adding it when missing) equal to the stable one: workloads that
// still select on beta.kubernetes.io/os or /arch keep working.
var betaLabels = [][2]string{
	{v1.LabelOSStable, "beta.kubernetes.io/os"},
	{v1.LabelArchStable, "beta.kubernetes.io/arch"},
}

// betaLabelsToSet returns the beta labels node needs so they equal its stable labels, or nil.
// A Node without a stable label is left alone.
func betaLabelsToSet(node *v1.Node) map[string]string {
	var out map[string]string
	for _, p := range betaLabels {
		stable, ok := node.Labels[p[0]]
		if !ok {
			continue
		}
		if beta, ok := node.Labels[p[1]]; !ok || beta != stable {
			if out == nil {
				out = map[string]string{}
			}
			out[p[1]] = stable
		}
	}
	return out
}
