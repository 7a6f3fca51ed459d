// Package daemon is the nvmetd daemon, the program behind cmd/nvmetd: its
// command line and configuration loading (a YAML file, NVMETD_* environment
// variables and flags through viper), the target's lifecycle (start, SIGHUP
// reload, drain on SIGTERM, systemd notify and watchdog, backend health),
// the control socket with its status, reload, management (target/mgmtapi)
// and trace (target/traceapi) routes and the client subcommands that talk
// to it (status, reload, trace), the Prometheus endpoint, and the wiring
// of a gateway group member (gateway/gwtarget). Main is the whole program.
package daemon
