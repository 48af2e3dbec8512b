package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Servers publish each service's schema (the FileDescriptorSet of the
// file defining it, with its imports) to Redis when they start, so that
// operators' tools (rpr ls, rpr describe, rpr call) can describe and call
// services with no local .proto files, as grpcurl does with gRPC
// reflection.

// ErrNoSchema is wrapped by the error Service.Schema and
// Service.SchemaFiles return when Redis holds no schema for the service.
var ErrNoSchema = errors.New("no published schema")

// SchemaFiles reads the schema of the service and builds a registry of
// its files: the file defining the service and everything it imports.
// While workers of several releases serve it, it is the schema of the
// live worker that serves the most methods (the newest of those on a
// tie), so that tools see every method some worker serves; with no live
// worker, the newest worker's; with no worker record naming one, the
// schema the last server to start published. The registry is new and
// separate from protoregistry.GlobalFiles, so the caller needs none of
// the service's generated code: pair it with dynamicpb (and
// dynamicpb.NewTypes for protojson and Any). The error wraps ErrNoSchema
// when nothing was published.
func (s *Service) SchemaFiles(ctx context.Context) (*protoregistry.Files, error) {
	h, err := s.Health(ctx)
	if err != nil {
		return nil, err
	}
	if id := bestSchema(h.Workers); id != "" {
		raw, err := s.rdb.HGet(ctx, s.keys.Schemas(s.name), id).Bytes()
		if err == nil {
			return s.parseSchema(raw)
		}
		if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("rpr: read schema version %s of %s from %s: %w", id, s.name, s.keys.Schemas(s.name), err)
		}
		// Not there (yet): the worker publishes it again at its next beat.
	}
	key := s.keys.Schema(s.name)
	raw, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("rpr: service %s: %w under prefix %q (key %s is absent): servers publish it each time they start, but only those built with an rpr that has rpr ls/describe/call; start a server of %s built with such an rpr once (or check the service name and the prefix)",
			s.name, ErrNoSchema, s.keys.Prefix(), key, s.name)
	}
	if err != nil {
		return nil, fmt.Errorf("rpr: read the schema of %s from %s: %w", s.name, key, err)
	}
	return s.parseSchema(raw)
}

// SchemaVersion reads one version of the service's schema (a
// WorkerStatus.Schema); the error wraps ErrNoSchema when Redis does not
// hold it.
func (s *Service) SchemaVersion(ctx context.Context, id string) (*protoregistry.Files, error) {
	raw, err := s.rdb.HGet(ctx, s.keys.Schemas(s.name), id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("rpr: service %s: schema version %s: %w (its worker publishes it again within a second if it is live)", s.name, id, ErrNoSchema)
	}
	if err != nil {
		return nil, fmt.Errorf("rpr: read schema version %s of %s: %w", id, s.name, err)
	}
	return s.parseSchema(raw)
}

// bestSchema picks the schema version SchemaFiles describes: that of the
// live worker serving the most methods, the newest on a tie; with no live
// worker naming one, the newest worker's.
func bestSchema(workers []WorkerStatus) string {
	best := -1
	for i, w := range workers {
		if w.Schema == "" {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := workers[best]
		switch {
		case w.Live != b.Live:
			if w.Live {
				best = i
			}
		case len(w.Methods) != len(b.Methods):
			if len(w.Methods) > len(b.Methods) {
				best = i
			}
		case w.Started.After(b.Started):
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return workers[best].Schema
}

// parseSchema builds the registry of a published schema.
func (s *Service) parseSchema(raw []byte) (*protoregistry.Files, error) {
	key := s.keys.Schema(s.name)
	set := new(descriptorpb.FileDescriptorSet)
	if err := proto.Unmarshal(raw, set); err != nil {
		return nil, fmt.Errorf("rpr: the schema of %s at %s is not a FileDescriptorSet: %v (restart a server of the service to publish it again)", s.name, key, err)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("rpr: the schema of %s at %s is incomplete or invalid: %v (restart a server of the service to publish it again)", s.name, key, err)
	}
	return files, nil
}

// Schema returns the descriptor of the service from the schema its
// servers published; see SchemaFiles. Its methods' Input and Output
// describe the messages, for dynamicpb; tunnel.MethodDescFor turns a
// method into what tunnel.Client.Invoke takes.
func (s *Service) Schema(ctx context.Context) (protoreflect.ServiceDescriptor, error) {
	files, err := s.SchemaFiles(ctx)
	if err != nil {
		return nil, err
	}
	return ServiceInFiles(files, s.name)
}

// ServiceInFiles finds service in files, a registry Service.SchemaFiles
// built, for a tool that reads the schema once and needs both the files
// (to resolve message types) and the service.
func ServiceInFiles(files *protoregistry.Files, service string) (protoreflect.ServiceDescriptor, error) {
	d, err := files.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil, fmt.Errorf("rpr: the published schema has no service %s (a schema key belongs to the service of its hash tag; was it written by hand?)", service)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("rpr: %s in the published schema is a %T, not a service", service, d)
	}
	return sd, nil
}
