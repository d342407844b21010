// Package churn keeps each core controller kcm-split replaces busy with a steady stream of small
// changes, and times how long each change waits for its effect: the migration drill's churn
// (deploy/tests/drills/migration), for any cluster reached through a kubernetes.Interface.
//
// One loop per controller makes one change at a time (a Pod's readiness flipped, a quota's Pod
// deleted, a namespace deleted, a claim created, a Node's Lease left to expire, a LoadBalancer
// Service created), polls for its effect every 100 ms, and makes the next change 0.5 s after
// the effect appeared. A stretch in which no owner acts on the controller's objects therefore
// shows up, to within that pause, as the wait of the change made when it began (Loop.Gap,
// Churn.GapTable). A change whose effect does not appear within Config.EffectTimeout is lost
// work (Report.Lost). Few objects live at any time.
//
// Use:
//
//	ch, err := churn.New(churn.Config{Client: c, Dynamic: dyn, Prefix: "e2e", NodeGrace: 50 * time.Second})
//	err = ch.Setup(ctx)             // objects, fake Nodes (a controller must run for Start)
//	ch.Pause(churn.ServiceLB)       // loops can start paused, and pause and resume at any time
//	err = ch.Start(ctx)             // the loops and the fake kubelets' renewals
//	defer ch.Close()
//	phases := ch.Phases(catchUp, logf) // each phase timed until every loop acts again after it
//	phases.Run(ctx, t, "switch", func() { ... }) // switch owners (ch.WaitCaughtUp: by hand)
//	rep := ch.Stop(ctx)             // each loop's last change awaited, end states checked
//	for _, line := range ch.GapTable(phases.Windows) { log(line) }
//	err = ch.Cleanup(ctx)           // on a cluster that outlives the test
//
// Everything it creates is named from Config.Prefix and labelled LabelKey=<prefix>: namespaces
// <prefix>-endpoints, -quota, -pv, -lb and <prefix>-ns-<n>; Nodes <prefix>-node-0, -node-1 and
// -node-flap with their Leases in kube-node-lease; PersistentVolumes <prefix>-<n> of class
// <prefix>-static; the IPAddressPool <prefix>-pool.
//
// On a cluster with a real kubelet: the churn's Pods are either bound to a fake Node (the
// endpoints loop's Pod) or left unscheduled with a scheduler name no scheduler answers to (the
// quota loop's), so no kubelet runs them; the fake kubelets renew only the fake Nodes' Leases
// and never touch another Node. What does see the fake Nodes: DaemonSets whose Pods tolerate
// everything (kube-proxy) get a Pod per fake Node that stays Pending, removed with the Nodes
// by Cleanup; and the node lifecycle controller counts them in their zone's health, so set
// Config.NodeZone to keep them in a zone of their own, away from the real Node's.
package churn
