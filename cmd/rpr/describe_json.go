package main

import (
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// describeDoc is rpr describe -o json: the descriptors of the target as
// protobuf JSON with the .proto field names, so that its keys are
// snake_case like every other -o json of rpr.
type describeDoc struct {
	Name     string             `json:"name"`
	File     string             `json:"file"`
	Service  json.RawMessage    `json:"service,omitempty"`
	Method   json.RawMessage    `json:"method,omitempty"`
	Messages []describedMessage `json:"messages"`
}

// describedMessage is a message of describeDoc, by full name.
type describedMessage struct {
	FullName   string          `json:"full_name"`
	Descriptor json.RawMessage `json:"descriptor"`
}

// describeJSON writes t's descriptors: the service or the method, and the
// request and response messages it names, each once.
func describeJSON(out io.Writer, t *schemaTarget) error {
	marshal := protojson.MarshalOptions{Resolver: t.types, UseProtoNames: true}
	raw := func(m proto.Message) (json.RawMessage, error) {
		b, err := marshal.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("describe %s as JSON: %w", t.service.FullName(), err)
		}
		return b, nil
	}
	doc := describeDoc{File: t.service.ParentFile().Path(), Messages: []describedMessage{}}
	var methods []protoreflect.MethodDescriptor
	var err error
	if t.method != nil {
		doc.Name = string(t.method.FullName())
		methods = append(methods, t.method)
		doc.Method, err = raw(protodesc.ToMethodDescriptorProto(t.method))
	} else {
		doc.Name = string(t.service.FullName())
		for i := range t.service.Methods().Len() {
			methods = append(methods, t.service.Methods().Get(i))
		}
		doc.Service, err = raw(protodesc.ToServiceDescriptorProto(t.service))
	}
	if err != nil {
		return err
	}
	seen := map[protoreflect.FullName]bool{}
	for _, md := range methods {
		for _, msg := range []protoreflect.MessageDescriptor{md.Input(), md.Output()} {
			if seen[msg.FullName()] {
				continue
			}
			seen[msg.FullName()] = true
			b, err := raw(protodesc.ToDescriptorProto(msg))
			if err != nil {
				return err
			}
			doc.Messages = append(doc.Messages, describedMessage{string(msg.FullName()), b})
		}
	}
	return writeJSON(out, doc)
}
