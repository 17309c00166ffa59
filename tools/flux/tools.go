//go:build tools

// Package tools pins Flux's kustomize-controller (its module's root package
// is the controller's main) for the local test cluster: `DEPLOYER=flux`
// (docs/gitops.md) runs it on the host in the cluster's network namespace,
// reading each release from an ExternalArtifact the harness serves. A
// module of its own so its dependencies never move the other tools'.
// Nothing compiles this file: tools/build.sh builds the command with `go
// build`, and copies the Kustomization CRD from this module and the
// ExternalArtifact CRD from source-controller at the version of its API
// this module requires (as kustomize-controller's Makefile fetches it).
package tools

import (
	_ "github.com/fluxcd/kustomize-controller"
)
