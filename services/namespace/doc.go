// Package namespace is the kcm-split namespace controller; see the module README section in the top-level README.
package namespace
