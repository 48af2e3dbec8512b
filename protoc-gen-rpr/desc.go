package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/compiler/protogen"

	"github.com/rprtunnel/rpr/internal/protoopts"
)

// The ServiceInfo and ServiceDesc a generated file declares: what the
// runtime reads of a service and its methods, options included.

// genServiceInfo writes the service's tunnel.ServiceInfo: what its
// (rpr.v1.service) options say, once, for every MethodDesc to point to.
func genServiceInfo(g *protogen.GeneratedFile, s *service) {
	n := s.names
	writeDoc(g,
		paragraph("%s is the tunnel.ServiceInfo of the %s service: its name and what its (rpr.v1.service) options say. Every method of %s points to it.",
			n.serviceInfo, s.Desc.FullName(), n.serviceDesc),
		deprecatedIf(s.opts.Deprecated),
	)
	g.P("var ", n.serviceInfo, " = ", tunnelPackage.Ident("ServiceInfo"), "{")
	g.P("Name: ", quote(string(s.Desc.FullName())), ",")
	if s.opts.BizCode != "" {
		g.P("BizCode: ", quote(s.opts.BizCode), ",")
	}
	if s.opts.MaxBacklog != 0 {
		g.P("MaxBacklog: ", s.opts.MaxBacklog, ",")
	}
	if s.opts.Shards != 0 {
		g.P("Shards: ", s.opts.Shards, ",")
	}
	g.P("}")
	g.P()
}

func genServiceDesc(g *protogen.GeneratedFile, file *protogen.File, s *service, withComments bool) {
	n := s.names
	writeDoc(g,
		paragraph("%s is the tunnel.ServiceDesc of the %s service, with each method's defaults from the .proto options. It is meant to be passed around (as %s and the client do), not changed.",
			n.serviceDesc, s.Desc.FullName(), n.register),
		deprecatedIf(s.opts.Deprecated),
	)
	g.P("var ", n.serviceDesc, " = ", tunnelPackage.Ident("ServiceDesc"), "{")
	g.P("Service: &", n.serviceInfo, ",")
	g.P("HandlerType: (*", n.serverInterface, ")(nil),")
	g.P("Methods: []", tunnelPackage.Ident("MethodDesc"), "{")
	for _, m := range s.methods {
		g.P("{")
		g.P("Service: &", n.serviceInfo, ",")
		g.P("Name: ", quote(string(m.Desc.Name())), ",")
		if m.opts.Timeout != 0 {
			g.P("Timeout: ", durationExpr(g, m.opts.Timeout), ",")
		}
		if m.opts.Idempotent {
			g.P("Idempotent: true,")
		}
		if m.opts.Retry != nil {
			genRetryPolicy(g, m.opts.Retry)
		}
		if m.opts.Async {
			g.P("Async: true,")
		}
		if m.kind == unary {
			g.P("Handler: ", m.names.handler, ",")
		} else {
			if m.Desc.IsStreamingClient() {
				g.P("ClientStreams: true,")
			}
			if m.Desc.IsStreamingServer() {
				g.P("ServerStreams: true,")
			}
			g.P("StreamHandler: ", m.names.handler, ",")
		}
		g.P("},")
	}
	g.P("},")
	g.P("File: ", quote(file.Desc.Path()), ",")
	if withComments {
		g.P("SourceInfo: ", sourceInfoConst(file), ",")
	}
	g.P("}")
}

// genRetryPolicy writes the Retry field of a MethodDesc, leaving unset
// fields to the runtime's defaults.
func genRetryPolicy(g *protogen.GeneratedFile, p *protoopts.Retry) {
	g.P("Retry: &", tunnelPackage.Ident("RetryPolicy"), "{")
	if p.MaxAttempts != 0 {
		g.P("MaxAttempts: ", p.MaxAttempts, ",")
	}
	if p.InitialBackoff != 0 {
		g.P("InitialBackoff: ", durationExpr(g, p.InitialBackoff), ",")
	}
	if p.MaxBackoff != 0 {
		g.P("MaxBackoff: ", durationExpr(g, p.MaxBackoff), ",")
	}
	if p.Multiplier != 0 {
		g.P("Multiplier: ", strconv.FormatFloat(p.Multiplier, 'g', -1, 64), ",")
	}
	if len(p.RetryableCodes) > 0 {
		codes := make([]string, len(p.RetryableCodes))
		for i, c := range p.RetryableCodes {
			codes[i] = g.QualifiedGoIdent(tunnelPackage.Ident(codeConstName(c)))
		}
		g.P("RetryableCodes: []", tunnelPackage.Ident("Code"), "{", strings.Join(codes, ", "), "},")
	}
	g.P("},")
}

// codeConstName is the name of a code's constant in package tunnel:
// DEADLINE_EXCEEDED -> DeadlineExceeded, OK -> OK.
func codeConstName(name string) string {
	if name == "OK" {
		return "OK"
	}
	var b strings.Builder
	for _, word := range strings.Split(name, "_") {
		b.WriteString(word[:1] + strings.ToLower(word[1:]))
	}
	return b.String()
}

// durationExpr writes d as a Go expression in the largest unit that holds it
// exactly: 5 * time.Second, 1500 * time.Millisecond, time.Minute.
func durationExpr(g *protogen.GeneratedFile, d time.Duration) string {
	units := []struct {
		name string
		size time.Duration
	}{
		{"Hour", time.Hour},
		{"Minute", time.Minute},
		{"Second", time.Second},
		{"Millisecond", time.Millisecond},
		{"Microsecond", time.Microsecond},
		{"Nanosecond", time.Nanosecond},
	}
	for _, u := range units {
		if d%u.size != 0 {
			continue
		}
		unit := g.QualifiedGoIdent(timePackage.Ident(u.name))
		if d == u.size {
			return unit
		}
		return fmt.Sprintf("%d * %s", d/u.size, unit)
	}
	panic("unreachable: every duration is a whole number of nanoseconds")
}
