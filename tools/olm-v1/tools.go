//go:build tools

// Package tools pins OLM v1 for the local test cluster: operator-controller
// and catalogd (both in operator-controller's module, which also ships
// their CRDs and manifests), and go-containerregistry, whose registry package
// cmd/registry serves. Nothing compiles this file: tools/build.sh builds each
// imported command with `go build` from this module, so go.mod/go.sum fix
// their versions.
package tools

import (
	_ "github.com/google/go-containerregistry/pkg/registry"
	_ "github.com/operator-framework/operator-controller/cmd/catalogd"
	_ "github.com/operator-framework/operator-controller/cmd/operator-controller"
)
