// Package quota is the kcm-split quota controller; see the module README section in the top-level README.
package quota
