// Command registry serves an OCI distribution registry (go-containerregistry's
// pkg/registry) for the local test cluster: OLM v1 pulls its catalog and
// bundle images from it. Manifests live in memory (they are gone when it
// exits); blobs too, unless -disk names a directory. It speaks HTTPS when
// given -tls-cert and -tls-key, plain HTTP otherwise.
//
//	registry -address 10.231.1.2:5000 -tls-cert tls.crt -tls-key tls.key
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	address := flag.String("address", "127.0.0.1:5000", "host:port to listen on")
	certFile := flag.String("tls-cert", "", "PEM certificate (chain) to serve HTTPS with; needs -tls-key")
	keyFile := flag.String("tls-key", "", "PEM private key of -tls-cert")
	disk := flag.String("disk", "", "directory to keep blobs in (default: memory)")
	flag.Parse()
	if flag.NArg() > 0 || (*certFile == "") != (*keyFile == "") {
		flag.Usage()
		os.Exit(2)
	}

	var options []registry.Option
	if *disk != "" {
		options = append(options, registry.WithBlobHandler(registry.NewDiskBlobHandler(*disk)))
	}
	listener, err := net.Listen("tcp", *address)
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{
		Handler:           registry.New(options...),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if *certFile != "" {
		log.Printf("serving https on %s", listener.Addr())
		err = server.ServeTLS(listener, *certFile, *keyFile)
	} else {
		log.Printf("serving http on %s", listener.Addr())
		err = server.Serve(listener)
	}
	log.Fatal(err)
}
