// Package testcluster is what integration tests use to run against real
// agents: Start brings up a localcluster for one test and stops it when the
// test ends (StartSimNode: one with the gpushare plugin on simulated GPUs
// and simulated GPU processes), and Eventually is how tests wait for
// something to happen. It
// imports package testing, so only tests import it; the demo uses package
// localcluster directly.
package testcluster
