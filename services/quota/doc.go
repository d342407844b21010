// Package quota is kube-controller-manager's resource quota controller as a service of its
// own. The apiserver's ResourceQuota admission charges usage when objects are created; this
// controller copies each quota's spec.hard to status.hard, recomputes status.used from the
// objects that exist, and gives usage back as soon as objects go away or stop being charged
// (a Pod turning Succeeded or Failed, a Service losing its load balancer, a claim shrinking).
//
// Unlike upstream, a resource type that cannot be listed (a CRD whose conversion webhook is
// down) holds back only the quotas that count it, and only for that resource: the rest of their
// usage is published, and an Event on the quota names the resource that cannot be counted.
package quota
