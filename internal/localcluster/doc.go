// Package localcluster starts real Consul and Nomad agents on one machine,
// for integration tests (through package testcluster) and for the demo: a
// single-server Consul and a Nomad agent that is both server and client, on
// free loopback ports in a temporary directory, with raw_exec enabled, the
// cloud fingerprinters denied, and an optional device plugin directory and
// plugin configuration.
//
// With Options.ACL both agents run with ACLs on and default deny, as in
// production: the cluster's clients carry management tokens, the Consul
// agent and Nomad's Consul integration get tokens of their own, and
// CreateNomadToken, CreateConsulToken and UsePluginToken give the device
// plugin and the services least-privilege tokens.
//
// The agents are the pinned binaries that `make tools` builds into the tools
// cache (GPUSHARE_TOOLS_DIR, default $XDG_CACHE_HOME/gpushare/tools). Close
// stops both agents and every process they started (plugins, executors,
// tasks). When an agent does not come up, the error carries the last lines of
// its log.
package localcluster
