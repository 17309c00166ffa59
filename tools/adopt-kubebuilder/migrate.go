package main

import (
	"fmt"
	"os"

	"example.com/widget-operator/internal/controller"
)

// `manager migrate <namespace/widget>`: the migration Job's command (the
// reconciler runs it from this image). The data here is a Widget's
// stand-in: migrating it is saying so.
func init() {
	if len(os.Args) < 2 || os.Args[1] != "migrate" {
		return
	}
	fmt.Printf("migrated %s to %s\n", os.Args[2:], controller.Release)
	os.Exit(0)
}
