// Command terraform-provider-gpushare is the gpushare provider plugin for
// Terraform and OpenTofu (package terraform/provider). Terraform starts it;
// it is not run by hand. Install it where the CLI finds providers, e.g. a
// filesystem mirror (terraform/README.md).
package main

import (
	"context"
	"log"

	"github.com/gpushare/nomad-gpushare/terraform/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
)

// version is the provider's version, as its mirror directory names it.
var version = "0.1.0"

func main() {
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.opentofu.org/gpushare/gpushare",
	})
	if err != nil {
		log.Fatal(err)
	}
}
