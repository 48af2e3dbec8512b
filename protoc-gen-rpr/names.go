package main

// This file holds every naming rule of the generated code, so the names users
// see (and the ones that must not collide) can be read in one place, and the
// check that they do not collide with each other or with protoc-gen-go's.
//
// s.GoName and m.GoName are protoc-gen-go's CamelCase forms of the proto
// names (service "greeter" becomes "Greeter", "my_svc" becomes "MySvc"). They
// always start with an upper-case letter, so a generated name never is a Go
// keyword, and the unexported names below never collide with protoc-gen-go's
// (which start with "file_" and end in suffixes such as "_rawDesc").
//
// Known limit: where the generated functions name a message type, the local
// names c, ctx, in, opts, out, srv, decode, interceptor, info, req, stream
// and err are in scope. A message from a Go package whose import path ends in one of those
// (".../in") is then shadowed, and the code does not compile.
// protoc-gen-go-grpc has the same limit.

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/types/gofeaturespb"
)

// serviceNames are the Go identifiers generated for one service, shown for a
// service named Greeter.
type serviceNames struct {
	clientInterface string // GreeterClient
	clientImpl      string // greeterClient, the unexported implementation
	newClient       string // NewGreeterClient
	serverInterface string // GreeterServer
	unimplemented   string // UnimplementedGreeterServer
	unsafe          string // UnsafeGreeterServer
	mustEmbed       string // mustEmbedUnimplementedGreeterServer, a method
	register        string // RegisterGreeterServer
	serviceDesc     string // Greeter_ServiceDesc
	serviceInfo     string // Greeter_ServiceInfo
}

// methodNames are the Go identifiers generated for one method, shown for
// Greeter.SayHello. The method's own Go name is m.GoName (SayHello).
type methodNames struct {
	fullMethodConst string // Greeter_SayHello_FullMethodName
	handler         string // _Greeter_SayHello_Handler

	// A streaming method also gets the names grpc-go gave its client's and
	// its handler's stream before it had generic stream types, as aliases
	// of the generic ones: Greeter_SayHelloClient and
	// Greeter_SayHelloServer. They are "" for a unary method.
	clientStream string
	serverStream string
}

// embeddedByValueMethod is the method of every Unimplemented server type that
// Register calls to find out, before the first request, whether the type is
// embedded by a nil pointer. It is unexported, so it never collides with a
// method of the service.
const embeddedByValueMethod = "testEmbeddedByValue"

func namesOfService(s *protogen.Service) serviceNames {
	name := s.GoName
	return serviceNames{
		clientInterface: name + "Client",
		clientImpl:      unexport(name) + "Client",
		newClient:       "New" + name + "Client",
		serverInterface: name + "Server",
		unimplemented:   "Unimplemented" + name + "Server",
		unsafe:          "Unsafe" + name + "Server",
		mustEmbed:       "mustEmbedUnimplemented" + name + "Server",
		register:        "Register" + name + "Server",
		serviceDesc:     name + "_ServiceDesc",
		serviceInfo:     name + "_ServiceInfo",
	}
}

func namesOfMethod(s *protogen.Service, m *protogen.Method) methodNames {
	n := methodNames{
		fullMethodConst: s.GoName + "_" + m.GoName + "_FullMethodName",
		handler:         "_" + s.GoName + "_" + m.GoName + "_Handler",
	}
	if kindOf(m) != unary {
		n.clientStream = s.GoName + "_" + m.GoName + "Client"
		n.serverStream = s.GoName + "_" + m.GoName + "Server"
	}
	return n
}

// packageLevel lists the names a method declares at package level.
func (n methodNames) packageLevel() []string {
	names := []string{n.fullMethodConst, n.handler}
	if n.clientStream != "" {
		names = append(names, n.clientStream, n.serverStream)
	}
	return names
}

// packageLevel lists the names a service declares at package level.
func (n serviceNames) packageLevel() []string {
	return []string{
		n.clientInterface, n.clientImpl, n.newClient, n.serverInterface,
		n.unimplemented, n.unsafe, n.register, n.serviceDesc, n.serviceInfo,
	}
}

// unexport lower-cases the first letter: "Greeter" becomes "greeter".
func unexport(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[size:]
}

// checkNameClashes reports each package-level name that the services to
// generate would declare twice in one Go package: two services' names (service
// "A_B" with method "C" and service "A" with method "B_C" both give
// _A_B_C_Handler; service "A_B" and streaming method "B" of service "A" both
// give A_BClient), or a service's name and one protoc-gen-go declares for a
// message, enum or extension of the package (service "Greeter" and message
// "GreeterClient"). Without this check such input gives Go code that does not
// compile, with an error that does not say which proto names to change.
func checkNameClashes(gen *protogen.Plugin) []error {
	// taken maps a package and a name in it to what declares the name,
	// e.g. "message foo.v1.Bar".
	taken := map[protogen.GoImportPath]map[string]string{}
	declare := func(pkg protogen.GoImportPath, name, by string) error {
		if taken[pkg] == nil {
			taken[pkg] = map[string]string{}
		}
		if first, ok := taken[pkg][name]; ok {
			// A GoImportPath prints quoted.
			return fmt.Errorf("protoc-gen-rpr: %s and %s both need the Go name %s in package %s; rename one of them", first, by, name, pkg)
		}
		taken[pkg][name] = by
		return nil
	}

	var errs []error
	// protoc-gen-go's names first, from every file of a package being
	// generated (also files of that package that are only imported).
	generating := map[protogen.GoImportPath]bool{}
	for _, f := range gen.Files {
		if f.Generate && len(f.Services) > 0 {
			generating[f.GoImportPath] = true
		}
	}
	for _, f := range gen.Files {
		if !generating[f.GoImportPath] {
			continue
		}
		for name, by := range protocGenGoNames(f) {
			// protoc-gen-go's own clashes are protoc-gen-go's to report.
			_ = declare(f.GoImportPath, name, by)
		}
	}
	for _, f := range gen.Files {
		if !f.Generate {
			continue
		}
		for _, s := range f.Services {
			by := "service " + string(s.Desc.FullName())
			for _, name := range namesOfService(s).packageLevel() {
				if err := declare(f.GoImportPath, name, by); err != nil {
					errs = append(errs, err)
				}
			}
			for _, m := range s.Methods {
				by := "method " + fullMethodName(m)
				for _, name := range namesOfMethod(s, m).packageLevel() {
					if err := declare(f.GoImportPath, name, by); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
	}
	return errs
}

// protocGenGoNames returns the exported package-level names protoc-gen-go
// declares for a file, each with what declares it.
func protocGenGoNames(f *protogen.File) map[string]string {
	names := map[string]string{
		f.GoDescriptorIdent.GoName: "file " + f.Desc.Path(),
	}
	addEnum := func(e *protogen.Enum) {
		by := "enum " + string(e.Desc.FullName())
		names[e.GoIdent.GoName] = by
		names[e.GoIdent.GoName+"_name"] = by
		names[e.GoIdent.GoName+"_value"] = by
		for _, v := range e.Values {
			names[v.GoIdent.GoName] = "enum value " + string(v.Desc.FullName())
		}
	}
	addExtension := func(x *protogen.Extension) {
		names["E_"+x.GoIdent.GoName] = "extension " + string(x.Desc.FullName())
	}
	var addMessage func(m *protogen.Message)
	addMessage = func(m *protogen.Message) {
		if m.Desc.IsMapEntry() {
			return // no Go type
		}
		by := "message " + string(m.Desc.FullName())
		names[m.GoIdent.GoName] = by
		if m.APILevel != gofeaturespb.GoFeatures_API_OPEN {
			names[m.GoIdent.GoName+"_builder"] = by
		}
		for _, field := range m.Fields {
			if field.Oneof != nil && !field.Oneof.Desc.IsSynthetic() {
				names[field.GoIdent.GoName] = "field " + string(field.Desc.FullName())
			}
			if field.Desc.HasDefault() {
				names["Default_"+field.GoIdent.GoName] = "field " + string(field.Desc.FullName())
			}
		}
		for _, e := range m.Enums {
			addEnum(e)
		}
		for _, x := range m.Extensions {
			addExtension(x)
		}
		for _, nested := range m.Messages {
			addMessage(nested)
		}
	}
	for _, e := range f.Enums {
		addEnum(e)
	}
	for _, x := range f.Extensions {
		addExtension(x)
	}
	for _, m := range f.Messages {
		addMessage(m)
	}
	return names
}

// fullMethodName returns the name rpr uses for a method on the wire, in logs
// and in errors: "pkg.Service/Method", without gRPC's leading slash.
func fullMethodName(m *protogen.Method) string {
	return string(m.Parent.Desc.FullName()) + "/" + string(m.Desc.Name())
}
