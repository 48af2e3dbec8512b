package main

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The descriptor protoc-gen-go embeds in <file>.pb.go has no comments, so
// the schema servers publish from it would have none either. The plugin
// writes the comments of each file with services into <file>_rpr.pb.go, as
// the wire encoding of a google.protobuf.SourceCodeInfo in a constant that
// every ServiceDesc of the file names (tunnel.ServiceDesc.SourceInfo); the
// server adds it to the file's descriptor when it publishes the schema,
// and rpr describe prints the comments.

// elementChildren maps the kind of a declaration to its children: the
// field number, in its descriptor message, of each repeated field that
// holds declarations, and their kind. A SourceCodeInfo path alternates
// such field numbers and indexes, starting from the file.
var elementChildren = map[string]map[int32]string{
	"file": {
		4: "message", // FileDescriptorProto.message_type
		5: "enum",    // enum_type
		6: "service", // service
		7: "field",   // extension
	},
	"message": {
		2: "field",   // DescriptorProto.field
		3: "message", // nested_type
		4: "enum",    // enum_type
		6: "field",   // extension
		8: "oneof",   // oneof_decl
	},
	"enum":    {2: "value"},  // EnumDescriptorProto.value
	"service": {2: "method"}, // ServiceDescriptorProto.method
}

// isDeclaration reports whether path leads to a declaration (a message,
// field, oneof, enum, enum value, service or method), rather than to an
// option, a name or the file's syntax line.
func isDeclaration(path []int32) bool {
	if len(path) == 0 || len(path)%2 != 0 {
		return false
	}
	kind := "file"
	for i := 0; i < len(path); i += 2 {
		next, ok := elementChildren[kind][path[i]]
		if !ok {
			return false
		}
		kind = next
	}
	return true
}

// commentLocations returns the locations of file's declarations that have
// a leading or trailing comment, with their spans (descriptors need them)
// and without detached comments (licence headers and the like).
func commentLocations(file *protogen.File) []*descriptorpb.SourceCodeInfo_Location {
	var locs []*descriptorpb.SourceCodeInfo_Location
	for _, loc := range file.Proto.GetSourceCodeInfo().GetLocation() {
		if !isDeclaration(loc.GetPath()) || (loc.LeadingComments == nil && loc.TrailingComments == nil) {
			continue
		}
		locs = append(locs, &descriptorpb.SourceCodeInfo_Location{
			Path:             loc.Path,
			Span:             loc.Span,
			LeadingComments:  loc.LeadingComments,
			TrailingComments: loc.TrailingComments,
		})
	}
	return locs
}

// sourceInfoConst names the constant holding file's comments.
func sourceInfoConst(file *protogen.File) string {
	return "file_" + strings.TrimPrefix(file.GoDescriptorIdent.GoName, "File_") + "_rprSourceInfo"
}

// genSourceInfo writes the constant holding the comments of file (see
// above), one location a line, and reports whether there was any.
func genSourceInfo(gen *protogen.Plugin, g *protogen.GeneratedFile, file *protogen.File) bool {
	locs := commentLocations(file)
	if len(locs) == 0 {
		return false
	}
	writeDoc(g, paragraph("%s is the wire encoding of a google.protobuf.SourceCodeInfo with the comments of %s, which servers publish with the schema (tunnel.ServiceDesc.SourceInfo).",
		sourceInfoConst(file), file.Desc.Path()))
	g.P("const ", sourceInfoConst(file), " = \"\" +")
	for i, loc := range locs {
		// The encoding of a SourceCodeInfo is that of its locations, one
		// after another, so each line is a SourceCodeInfo of one location.
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(&descriptorpb.SourceCodeInfo{
			Location: []*descriptorpb.SourceCodeInfo_Location{loc},
		})
		if err != nil {
			gen.Error(fmt.Errorf("%s: encoding the comments at %v: %w", file.Desc.Path(), loc.GetPath(), err))
			return false
		}
		sep := " +"
		if i == len(locs)-1 {
			sep = ""
		}
		g.P(strconv.Quote(string(raw)), sep)
	}
	g.P()
	return true
}
