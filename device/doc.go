// Package device is the gpushare Nomad device plugin: it publishes every
// NVIDIA GPU of a node in one of two families, whole GPUs (vendor "nvidia",
// type "gpu", one instance per GPU named by its UUID) and shares (type
// "gpu-share", one device group per GPU with vocab.DefaultSharesPerGPU instances
// "<UUID>-sNN", each 1% of the GPU; docs/design.md, "Units and device
// families"), and moves idle GPUs between the families safely (package
// partition; docs/design.md, "Partition protocol"). A MIG-enabled GPU is in
// neither family: its MIG devices are offered as whole devices, one group
// per MIG device name, as HashiCorp's nvidia plugin does. Reserve validates a
// binding against cached usage and returns the environment that tells the
// workload which GPU and which fraction it got. Usage comes from the Nomad
// API (package alloctrack), hardware from NVML or a simulated machine
// (package gpu).
package device
