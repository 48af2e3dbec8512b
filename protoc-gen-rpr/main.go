// Command protoc-gen-rpr is the protoc plugin that generates rpr clients and
// servers from .proto services, next to the messages protoc-gen-go generates.
//
// For each .proto file with services it writes <file>_rpr.pb.go, in the same
// Go package as <file>.pb.go. For a service Greeter that file declares
//
//   - Greeter_<Method>_FullMethodName constants ("pkg.Greeter/Method"),
//   - GreeterClient and NewGreeterClient(tunnel.ClientConn),
//   - GreeterServer, UnimplementedGreeterServer (to embed by value),
//     UnsafeGreeterServer and RegisterGreeterServer,
//   - for each streaming method, the aliases Greeter_<Method>Client and
//     Greeter_<Method>Server of its stream types,
//   - Greeter_ServiceDesc, the tunnel.ServiceDesc with each method's
//     timeout, idempotency, retry policy, business code, async flag, stream
//     kind and backlog cap from the .proto options.
//
// Methods are unary; or, when marked (rpr.v1.method).async, fire-and-forget:
// an async method must return google.protobuf.Empty; its client method
// returns a tunnel.Receipt once the request is queued (tunnel.Client.Enqueue)
// and its server method returns only an error; or streaming, in the shape
// of grpc-go's generated code: a server-streaming method Watch(Req) returns
// (stream Res) gives the client
//
//	Watch(ctx, *Req, ...tunnel.CallOption) (tunnel.ServerStreamingClient[Res], error)
//
// and the server Watch(*Req, tunnel.ServerStreamingServer[Res]) error;
// client-streaming and bidirectional methods likewise use
// tunnel.ClientStreamingClient/Server and tunnel.BidiStreamingClient/Server.
// Async streaming methods, async methods with another output type and
// malformed rpr options make the plugin fail with a message that names the
// method or service and says what to change.
//
// In a module of your own, the plugin is a Go tool of the same module
// version as the runtime, and the .proto file it reads options from is
// exported from it (see the README's tutorial):
//
//	go get github.com/rprtunnel/rpr/tunnel@latest
//	go get -tool github.com/rprtunnel/rpr/protoc-gen-rpr
//	go tool protoc-gen-rpr --export-proto third_party/rpr-proto
//
// --export-proto DIR writes DIR/rpr/v1/options.proto; put DIR on the
// include path (a module of the buf workspace, or protoc -I DIR) and
// generate code only for your own files: the Go package of options.proto
// is github.com/rprtunnel/rpr/gen/rpr/v1, in the runtime. The plugin
// refuses to run against an rpr/v1/options.proto that differs from its
// own, so an export left behind by an upgrade of rpr is caught at
// generation.
//
// Run it through buf, as a local plugin:
//
//	plugins:
//	  - local: [go, tool, protoc-gen-rpr]
//	    out: gen
//	    opt: paths=source_relative
//
// or through protoc with --plugin=protoc-gen-rpr=$(go tool -n
// protoc-gen-rpr) --rpr_out=gen --rpr_opt=paths=source_relative. The only
// options are protogen's own: paths=import|source_relative and
// M<file>=<go import path>.
package main

import (
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/compiler/protogen"

	rprversion "github.com/rprtunnel/rpr/internal/version"
)

// version is the plugin's version, written into the header of every file it
// generates: rpr's one version, which tunnel.Version and rpr version show
// too.
const version = rprversion.Version

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	exportDir := flag.String("export-proto", "", "write `DIR`/rpr/v1/options.proto, for your include path, and exit")
	flag.Parse()
	if *showVersion {
		fmt.Fprintf(os.Stdout, "protoc-gen-rpr %s\n", version)
		return
	}
	if *exportDir != "" {
		os.Exit(runExport(*exportDir, flag.Args()))
	}
	protogen.Options{}.Run(generate)
}
