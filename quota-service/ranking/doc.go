// Package ranking is the deployed side of the placement ranking mechanism
// (scheduler/placement's Ranking, docs/design.md "Placement ranking"): it
// computes, for every GPU node and every class of work in the cluster (GPU
// work, and CPU-only work that may land on GPU nodes), whether placing the
// class's typical task there grows gpushare's fragmentation measure, and
// publishes the answer as Nomad dynamic node metadata,
// "gpushare.rank.<class>" = "1" (does not grow it) or "0". Jobs carry an
// affinity on their class's key (Affinity), so Nomad's own scoring
// prefers the nodes where they fragment nothing.
//
// Compute is pure: a snapshot in, the metadata per node out. Publisher
// writes it through the Nomad API (POST /v1/client/metadata), only where a
// node's value changed and at most once per node per MinInterval.
package ranking
