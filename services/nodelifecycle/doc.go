// Package nodelifecycle is the kcm-split nodelifecycle controller; see the module README section in the top-level README.
package nodelifecycle
