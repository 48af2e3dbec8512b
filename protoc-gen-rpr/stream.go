package main

// The code generated for streaming methods has grpc-go's shape: the client
// method returns one of tunnel's generic client streams, the server method
// gets one of its generic server streams, each method has a
// tunnel.StreamHandler, and aliases keep grpc-go's older, non-generic
// stream names (Svc_WatchClient, Svc_WatchServer) so that code written for
// grpc-go ports with few edits.

import (
	"google.golang.org/protobuf/compiler/protogen"
)

const (
	errorsPackage = protogen.GoImportPath("errors")
	ioPackage     = protogen.GoImportPath("io")
)

// streamTypes returns, for a streaming method, the generic tunnel types of
// the caller's and the handler's side with their type arguments, such as
// tunnel.ServerStreamingClient[Event] and tunnel.ServerStreamingServer[Event].
func streamTypes(g *protogen.GeneratedFile, m *method) (client, server string) {
	in := g.QualifiedGoIdent(m.Input.GoIdent)
	out := g.QualifiedGoIdent(m.Output.GoIdent)
	generic := func(name string, args string) string {
		return g.QualifiedGoIdent(tunnelPackage.Ident(name)) + "[" + args + "]"
	}
	switch m.kind {
	case serverStreaming:
		return generic("ServerStreamingClient", out), generic("ServerStreamingServer", out)
	case clientStreaming:
		return generic("ClientStreamingClient", in+", "+out), generic("ClientStreamingServer", in+", "+out)
	case bidiStreaming:
		return generic("BidiStreamingClient", in+", "+out), generic("BidiStreamingServer", in+", "+out)
	}
	panic("streamTypes of a unary method " + m.fullName)
}

// streamClientSignature is a streaming client method's name, parameters
// and results: a server-streaming method takes the one request, the others
// take only the context and options, and all return the stream.
func streamClientSignature(g *protogen.GeneratedFile, m *method) string {
	client, _ := streamTypes(g, m)
	params := "ctx " + g.QualifiedGoIdent(contextPackage.Ident("Context"))
	if m.kind == serverStreaming {
		params += ", in *" + g.QualifiedGoIdent(m.Input.GoIdent)
	}
	params += ", opts ..." + g.QualifiedGoIdent(tunnelPackage.Ident("CallOption"))
	return m.GoName + "(" + params + ") (" + client + ", error)"
}

// streamServerSignature is a streaming server method's name, parameters and
// result: a server-streaming method gets the one request and the stream to
// send on, the others only the stream.
func streamServerSignature(g *protogen.GeneratedFile, m *method) string {
	_, server := streamTypes(g, m)
	params := server
	if m.kind == serverStreaming {
		params = "*" + g.QualifiedGoIdent(m.Input.GoIdent) + ", " + server
	}
	return m.GoName + "(" + params + ") error"
}

// streamClientDoc is the paragraph that tells callers of a streaming
// method how to use the stream it returns; "" for a unary method.
func streamClientDoc(m *method) string {
	switch m.kind {
	case serverStreaming:
		return paragraph("%s is server-streaming: it sends in and returns the stream of replies. Call Recv until it returns io.EOF, which means the server ended the stream with OK; any other error is the stream's status. Cancel ctx to stop early.",
			m.GoName)
	case clientStreaming:
		return paragraph("%s is client-streaming: Send each request on the stream it returns, then call CloseAndRecv, which closes the sending side and returns the server's one reply or the stream's status. Cancel ctx to give up.",
			m.GoName)
	case bidiStreaming:
		return paragraph("%s is bidirectional: Send requests and Recv replies on the stream it returns; one goroutine may send while another receives. Call CloseSend when done sending, and Recv until it returns io.EOF, which means the server ended the stream with OK; any other error is the stream's status. Cancel ctx to stop early.",
			m.GoName)
	}
	return ""
}

// streamServerDoc is the paragraph that tells implementations of a
// streaming method how to use their stream; "" for a unary method.
func streamServerDoc(m *method) string {
	switch m.kind {
	case serverStreaming:
		return paragraph("%s is server-streaming: it gets the caller's one request and Sends the replies on the stream. Return nil to end the stream with OK, or an error to end it with that status; the stream's Context ends when the caller goes away.",
			m.GoName)
	case clientStreaming:
		return paragraph("%s is client-streaming: Recv the requests from the stream until it returns io.EOF (the caller is done sending), then SendAndClose the one reply and return nil; or return an error to end the call with that status.",
			m.GoName)
	case bidiStreaming:
		return paragraph("%s is bidirectional: Recv requests from the stream until it returns io.EOF (the caller is done sending) and Send replies, in any order; one goroutine may send while another receives. Return nil to end the stream with OK, or an error to end it with that status.",
			m.GoName)
	}
	return ""
}

// genStreamClientMethod writes the client's implementation of streaming
// method m, the i-th method of s, and the alias of the stream type it
// returns. A server-streaming method sends the one request and closes the
// sending side before it returns the stream.
func genStreamClientMethod(g *protogen.GeneratedFile, s *service, m *method, i int) {
	in := g.QualifiedGoIdent(m.Input.GoIdent)
	out := g.QualifiedGoIdent(m.Output.GoIdent)
	g.P("func (c ", s.names.clientImpl, ") ", clientSignature(g, m), " {")
	g.P("stream, err := c.cc.NewStream(ctx, &", s.names.serviceDesc, ".Methods[", i, "], opts...)")
	g.P("if err != nil {")
	g.P("return nil, err")
	g.P("}")
	g.P("out := &", tunnelPackage.Ident("GenericClientStream"), "[", in, ", ", out, "]{ClientStream: stream}")
	if m.kind == serverStreaming {
		g.P("if err := out.SendMsg(in); err != nil {")
		g.P("if ", errorsPackage.Ident("Is"), "(err, ", ioPackage.Ident("EOF"), ") {")
		g.P("// The stream has ended already; Recv returns why.")
		g.P("return out, nil")
		g.P("}")
		g.P("return nil, err")
		g.P("}")
		g.P("if err := out.CloseSend(); err != nil {")
		g.P("return nil, err")
		g.P("}")
	}
	g.P("return out, nil")
	g.P("}")
	g.P()

	client, _ := streamTypes(g, m)
	writeDoc(g,
		paragraph("%s is the stream %s.%s returns, under the name grpc-go gave it before it had generic streams, so that code written for grpc-go compiles with few edits.",
			m.names.clientStream, s.names.clientInterface, m.GoName),
		deprecatedIf(m.opts.Deprecated || s.opts.Deprecated),
	)
	g.P("type ", m.names.clientStream, " = ", client)
	g.P()
}

// genStreamServerAlias writes the alias of the stream type the server
// method of m gets.
func genStreamServerAlias(g *protogen.GeneratedFile, s *service, m *method) {
	_, server := streamTypes(g, m)
	writeDoc(g,
		paragraph("%s is the stream %s.%s gets, under the name grpc-go gave it before it had generic streams, so that implementations written for grpc-go compile with few edits.",
			m.names.serverStream, s.names.serverInterface, m.GoName),
		deprecatedIf(m.opts.Deprecated || s.opts.Deprecated),
	)
	g.P("type ", m.names.serverStream, " = ", server)
	g.P()
}

// genStreamHandler writes the tunnel.StreamHandler of streaming method m: it
// gives the implementation a typed stream; for a server-streaming method it
// first receives the caller's one request. Stream interceptors are the
// runtime's to run, around the handler.
func genStreamHandler(g *protogen.GeneratedFile, s *service, m *method) {
	in := g.QualifiedGoIdent(m.Input.GoIdent)
	out := g.QualifiedGoIdent(m.Output.GoIdent)
	call := "srv.(" + s.names.serverInterface + ")." + m.GoName
	typed := "&" + g.QualifiedGoIdent(tunnelPackage.Ident("GenericServerStream")) + "[" + in + ", " + out + "]{ServerStream: stream}"
	g.P("func ", m.names.handler, "(srv any, stream ", tunnelPackage.Ident("ServerStream"), ") error {")
	if m.kind == serverStreaming {
		g.P("in := new(", in, ")")
		g.P("if err := stream.RecvMsg(in); err != nil {")
		g.P("return err")
		g.P("}")
		g.P("return ", call, "(in, ", typed, ")")
	} else {
		g.P("return ", call, "(", typed, ")")
	}
	g.P("}")
	g.P()
}
