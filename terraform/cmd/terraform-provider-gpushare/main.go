// Command terraform-provider-gpushare is the gpushare provider plugin for
// Terraform and OpenTofu (package terraform/provider). Terraform starts it;
// it is not run by hand, except `terraform-provider-gpushare -version`.
// Install it where the CLI finds providers, e.g. a filesystem mirror
// (terraform/README.md).
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/gpushare/nomad-gpushare/internal/version"
	"github.com/gpushare/nomad-gpushare/terraform/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
)

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("terraform-provider-gpushare"))
		return
	}
	// The provider reports internal/version's Version, which `make dist`
	// and `make terraform-mirror` set to the version its mirror directory
	// names.
	err := providerserver.Serve(context.Background(), provider.New(version.Version), providerserver.ServeOpts{
		Address: "registry.opentofu.org/gpushare/gpushare",
	})
	if err != nil {
		log.Fatal(err)
	}
}
