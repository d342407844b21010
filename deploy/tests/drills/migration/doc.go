// Package migration is the switch drill of issue 31 (`make migration-drill`): a real etcd and
// kube-apiserver with an audit log, upstream kube-controller-manager v1.36.3 as two
// leader-elected replicas, the six kcm-split binaries, and steady churn for each of their
// controllers. It runs the naive switch (the controllers turned off in KCM, then kcm-split
// started), the documented Leader Migration switch (runbook steps 0-3, KCM replicas rolled one
// at a time) and the rollback (R1-R3), and measures from the audit log and the churn's own
// timers: objects written by both KCM and kcm-split after each switch point (asserted 0), the
// longest time nothing acted on a change per controller (printed), and lost work (asserted 0).
//
// The drill takes minutes, so it runs only when KCM_SPLIT_MIGRATION_DRILL is set (the Makefile
// target sets it); otherwise its control plane is not even started.
package migration
