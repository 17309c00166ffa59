//go:build tools

// Package tools pins OLM and its companions for the local test cluster: the
// olm and catalog operators, opm (serves file-based catalogs) and
// operator-verify; the operator-framework/api module also supplies OLM's CRDs
// (its crds/ folder). Nothing compiles this file: tools/build.sh builds each
// imported command with `go build` from this module, so go.mod/go.sum fix
// their versions.
package tools

import (
	_ "github.com/operator-framework/api/cmd/operator-verify"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/catalog"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/olm"
	_ "github.com/operator-framework/operator-registry/cmd/opm"
)
