// Package servicelb is the kcm-split servicelb controller; see the module README section in the top-level README.
package servicelb
