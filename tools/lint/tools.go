//go:build tools

// Package tools pins actionlint, the GitHub Actions workflow linter. It lives
// in a module of its own so its dependencies never move OLM's. Nothing
// compiles this file: tools/build.sh builds the command with `go build`.
package tools

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
