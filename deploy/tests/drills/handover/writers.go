package handover

import (
	"strings"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// KCMClients are the client names of kube-controller-manager's (v1.36) controllers that
// kcm-split replaces (controllerContext.NewClient in cmd/kube-controller-manager/app): the
// node IPAM, node lifecycle and taint eviction controllers share node-controller. KCM runs no
// service-lb controller without a cloud provider, so it has none here.
var KCMClients = []string{
	"endpoint-controller", "endpointslice-controller", "endpointslicemirroring-controller",
	"node-controller", "resourcequota-controller", "namespace-controller", "persistent-volume-binder",
}

// KCMByUserAgent keeps the writes of KCM's controllers with the given client names when KCM
// runs with --use-service-account-credentials=false: every controller then writes as KCM's own
// user, and its client name ends the user agent ("kube-controller-manager/v1.36.3 (linux/amd64)
// kubernetes/<commit>/endpoint-controller").
func KCMByUserAgent(clients ...string) func(testenv.AuditEvent) bool {
	return func(ev testenv.AuditEvent) bool {
		if !strings.HasPrefix(ev.UserAgent, "kube-controller-manager/") {
			return false
		}
		for _, c := range clients {
			if strings.HasSuffix(ev.UserAgent, "/"+c) {
				return true
			}
		}
		return false
	}
}

// KCMByServiceAccount keeps the writes of KCM's controllers with the given client names when
// KCM runs with --use-service-account-credentials=true (kubeadm's default): each controller
// then writes as ServiceAccount kube-system/<client name>.
func KCMByServiceAccount(clients ...string) func(testenv.AuditEvent) bool {
	return ByServiceAccount("kube-system", clients...)
}

// ByServiceAccount keeps the requests made as one of the named ServiceAccounts of namespace.
func ByServiceAccount(namespace string, names ...string) func(testenv.AuditEvent) bool {
	users := map[string]bool{}
	for _, n := range names {
		users["system:serviceaccount:"+namespace+":"+n] = true
	}
	return func(ev testenv.AuditEvent) bool { return users[ev.User.Username] }
}

// KcmSplitIDs are the IDs of kcm-split's binaries, which begin their user agents
// ("endpoints-controller/v0.1.0 (linux/amd64) kcm-split/<identity>").
var KcmSplitIDs = []string{"endpoints-controller", "nodelifecycle-controller", "quota-controller",
	"namespace-controller", "service-lb-controller", "pv-binder-controller"}

// leaderElectionSuffix ends the user agent of a kcm-split binary's leader-election client.
const leaderElectionSuffix = "/leader-election"

// KcmSplitRequests keeps the requests of the kcm-split binaries with the given IDs, leader
// election included.
func KcmSplitRequests(ids ...string) func(testenv.AuditEvent) bool {
	return func(ev testenv.AuditEvent) bool {
		for _, id := range ids {
			if strings.HasPrefix(ev.UserAgent, id+"/") {
				return true
			}
		}
		return false
	}
}

// KcmSplitWrites keeps the requests of the controllers of the kcm-split binaries with the
// given IDs: not their leader election, whose Lease writes are the terms' business.
func KcmSplitWrites(ids ...string) func(testenv.AuditEvent) bool {
	ours := KcmSplitRequests(ids...)
	return func(ev testenv.AuditEvent) bool {
		return ours(ev) && !strings.HasSuffix(ev.UserAgent, leaderElectionSuffix)
	}
}
