//go:build tools

// Package tools pins the Kubernetes commands the local test cluster runs.
// It is never compiled into anything: tools/build.sh builds each imported
// command with `go build` from this module, so go.mod/go.sum fix their versions.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
