// Command validate-bundle checks an operator bundle directory (manifests/ and
// metadata/) with operator-framework/api's validators: the default bundle
// suite (CSV, CRDs, bundle) plus the "operatorframework" optional suite that
// `operator-sdk bundle validate --select-optional suite=operatorframework`
// runs (OperatorHub metadata including deprecated/removed APIs, good
// practices), since operator-sdk itself is not available here. It only reads
// the directory.
//
// Exit status: 0 when no validator reports an error (warnings are printed),
// 1 on validation errors, 2 on usage or load errors.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	apierrors "github.com/operator-framework/api/pkg/validation/errors"
	validator "github.com/operator-framework/api/pkg/validation/interfaces"
)

// operatorFrameworkSuite is what operator-sdk selects with suite=operatorframework.
// OperatorHubV2 already reports deprecated and removed APIs (for k8s-version),
// so AlphaDeprecatedAPIsValidator would only repeat its findings.
var operatorFrameworkSuite = validator.Validators{
	apivalidation.OperatorHubV2Validator,
	apivalidation.GoodPracticesValidator,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("validate-bundle", flag.ContinueOnError)
	flags.SetOutput(stderr)
	k8sVersion := flags.String("k8s-version", "",
		"Kubernetes version the bundle targets, for the deprecated-API check (default: the CSV's minKubeVersion)")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: validate-bundle [--k8s-version X.Y] <bundle-dir>")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() != 1 {
		flags.Usage()
		return 2
	}
	dir := flags.Arg(0)

	bundle, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		fmt.Fprintf(stderr, "validate-bundle: loading %s: %v\n", dir, err)
		return 2
	}

	results := apivalidation.DefaultBundleValidators.Validate(bundle.ObjectsToValidate()...)

	// The optional validators also look at every object of the bundle and at a
	// map of optional values (the same inputs operator-sdk passes them).
	objects := bundle.ObjectsToValidate()
	for _, object := range bundle.Objects {
		objects = append(objects, object)
	}
	objects = append(objects, map[string]string{"k8s-version": *k8sVersion})
	results = append(results, operatorFrameworkSuite.Validate(objects...)...)

	if report(results, stdout) {
		return 1
	}
	fmt.Fprintf(stdout, "bundle %s passed the default and operatorframework validators\n", dir)
	return 0
}

// report prints every warning and error and says whether there was an error.
func report(results []apierrors.ManifestResult, out io.Writer) bool {
	failed := false
	for _, result := range results {
		for _, warning := range result.Warnings {
			fmt.Fprintf(out, "WARN  %s: %s\n", result.Name, warning.Error())
		}
		for _, problem := range result.Errors {
			fmt.Fprintf(out, "ERROR %s: %s\n", result.Name, problem.Error())
			failed = true
		}
	}
	return failed
}
