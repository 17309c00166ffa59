//go:build tools

// Package tools pins helm-operator-plugins, whose main package (the
// module's root) is the Helm operator operator-sdk's helm plugin ships: a
// generic controller that reconciles each custom resource named in
// watches.yaml into a release of its chart. tools/adopt-helm-operator.sh
// puts it, unchanged, into the image of a Helm-based operator that adopts
// the gate with configuration only. A module of its own, so its
// dependencies (its own go.mod's Helm and controller-runtime) never move
// the cluster tools'. Nothing compiles this file: tools/build.sh builds the
// command with `go build`.
package tools

import (
	_ "github.com/operator-framework/helm-operator-plugins"
)
