// Package app is the lifecycle every kcm-split binary shares: Main(Spec) reads the flags (each
// also from a KCM_SPLIT_ environment variable), sets up logging, signals, the REST client, the
// metrics and health servers and leader election on the controller's own Lease, and builds and
// runs the controller only while this process leads.
//
// Its files, by job:
//   - cli.go, cli_flags.go, cli_options.go: the command line: Main, Run, Parse and Spec; the
//     common flags and the options they fill, grouped by job; the helpers a controller's own
//     Options use. Parsing and --help are internal/cmdline's; `<binary> check` is package check.
//   - lifecycle.go, lifecycle_runtime.go, lifecycle_serve.go, memlimit.go: one process:
//     logging, signals, clients, election, the servers, and the terms of leadership in which
//     a Runtime runs Spec.Run.
//   - runner.go: RunControllers, the one way a term runs a binary's controllers, and the
//     --controllers syntax (EnabledControllers).
//   - migration.go: --enable-leader-migration: the runner under shared/migration's Lease.
//   - takeover.go: --take-over-from-kcm: the runner behind package takeover's proof.
//   - sharding.go: --shards and --shard-index: the shard's Lease and shared/sharding's layout
//     fence.
package app
