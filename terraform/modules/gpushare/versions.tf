terraform {
  required_version = ">= 1.5"

  required_providers {
    # Tested with 1.4.20. The 2.x line changed nomad_job's hcl2 block.
    nomad = {
      source  = "hashicorp/nomad"
      version = ">= 1.4.20, < 2.0.0"
    }
    # This repository's provider (terraform/provider), installed from a
    # filesystem mirror: see terraform/README.md.
    gpushare = {
      source = "gpushare/gpushare"
    }
  }
}
