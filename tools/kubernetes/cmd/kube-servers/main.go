// Command kube-servers is the local cluster's Kubernetes servers in one
// binary: kube-apiserver, kube-controller-manager, kube-scheduler,
// kube-proxy and kubelet, each run as its own main in k8s.io/kubernetes/cmd
// runs it (its cobra command through component-base's cli.Run, after the
// same side-effect imports). The name it is started under picks the server:
// tools/build.sh links each server's name to this binary. Started under its
// own name, its first argument names the server (`kube-servers kubelet
// --version`).
//
// One binary instead of five because each server's own binary is a link of
// the same compiled packages into a file of about 100 MB, and on two cores
// those links were a fair part of a cold build of the cluster's tools
// (docs/local-cluster-tools.md). kubectl is not here: the demo's tool set
// does not run it, and its own packages would lengthen that set's build.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	_ "time/tzdata" // kube-apiserver's and kube-controller-manager's: CronJob time zones

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// Each server's command, as its own main makes it.
var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kube-proxy":              proxy.NewProxyCommand,
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, linked := servers[name]; !linked && len(os.Args) > 1 {
		// The server then sees its own name as argv[0] and only its
		// arguments after it, as under a link (cobra reads os.Args[1:]).
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	newCommand, known := servers[name]
	if !known {
		names := make([]string, 0, len(servers))
		for server := range servers {
			names = append(names, server)
		}
		slices.Sort(names)
		fmt.Fprintf(os.Stderr, "kube-servers: run it under the name of a server, or name one as its first argument: %s\n",
			strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
