// Package pvbinder is the kcm-split pvbinder controller; see the module README section in the top-level README.
package pvbinder
