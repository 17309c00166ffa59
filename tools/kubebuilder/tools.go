//go:build tools

// Package tools pins kubebuilder (the scaffolding operator-sdk's Go plugin
// is built on), controller-gen (controller-tools) and kustomize: what
// tools/adopt-kubebuilder.sh scaffolds an operator with and builds its
// manifests with, as the scaffold's Makefile does. A module of its own, so
// its dependencies never move the cluster tools'. Nothing compiles this
// file: tools/build.sh builds each imported command with `go build`.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
	_ "sigs.k8s.io/kubebuilder/v4"
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
