//go:build tools

// Package tools pins the one Kubernetes command the local cluster's tools
// build from upstream's own main, kubectl. It is never compiled into
// anything: tools/build.sh builds it with `go build` from this module, so
// go.mod/go.sum fix its version. The servers are cmd/kube-servers, which
// imports their packages.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
)
