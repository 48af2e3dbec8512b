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
// Run it through buf (see buf.gen.yaml at the repository root):
//
//	plugins:
//	  - local: [go, run, ./protoc-gen-rpr]
//	    out: gen
//	    opt: paths=source_relative
//
// or through protoc with --rpr_out=. --rpr_opt=paths=source_relative. The
// only options are protogen's own: paths=import|source_relative and
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
	flag.Parse()
	if *showVersion {
		fmt.Fprintf(os.Stdout, "protoc-gen-rpr %s\n", version)
		return
	}
	protogen.Options{}.Run(generate)
}
