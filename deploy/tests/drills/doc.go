// Package drills holds the fault drills of kcm-split: each runs the shipped binaries against a
// real etcd and kube-apiserver (shared/testenv), injects a fault (a frozen leader, an
// apiserver outage, expired watches) under load, and asserts the invariants an operator relies
// on: no write by a deposed leader, nothing lost, nothing doubled, no process exit. Timings
// are logged (the table in this folder's README.md), never asserted.
package drills
