// Package scale measures each kcm-split controller against upstream kube-controller-manager
// running only the matching controllers, one after the other on one real kube-apiserver
// (shared/testenv) filled with a cluster of size S, M or L (kwok renews the Nodes' Leases), and
// upstream's whole process with every controller on. `make scale SIZE=S` runs it; README.md
// holds the results and defines each row. Timings are reported, never asserted.
package scale
