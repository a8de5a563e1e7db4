//go:build tools

// Package deps pins the project's direct dependencies in go.mod while the
// packages that use them are being written. It is never built.
package deps

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	_ "github.com/hashicorp/consul/api"
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/hashicorp/go-plugin"
	_ "github.com/hashicorp/nomad/api"
	_ "github.com/hashicorp/nomad/plugins/device"
	_ "github.com/prometheus/client_golang/prometheus"
)
