//go:build tools

// Package tools pins the etcd server the local test cluster runs. It is never
// compiled into anything: tools/build.sh builds the imported command with
// `go build` from this module, so go.mod/go.sum fix its version.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
