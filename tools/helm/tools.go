//go:build tools

// Package tools pins the Helm CLI, the deployer the admission policy's
// cluster tests push the sample operator's chart with. It lives in a module
// of its own so its dependencies never move the others'. Nothing compiles
// this file: tools/build.sh builds the command with `go build`.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
