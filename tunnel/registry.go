package tunnel

// The service registry: servers publish each service's schema (its
// FileDescriptorSet) to Redis when they start, next to the worker
// heartbeats they already publish, so that operators' tools (rpr ls,
// rpr describe, rpr call) can find services and call them with no local
// .proto files, as grpcurl does with gRPC reflection.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rprtunnel/rpr/internal/store"
)

// ErrNoSchema is wrapped by the error LoadSchema and LoadSchemaFiles return
// when Redis holds no schema for the service.
var ErrNoSchema = errors.New("no published schema")

// serviceFileSet returns the FileDescriptorSet of the .proto file that
// defines service, with every file it imports, transitively, dependencies
// first (as protoc writes them). The file is looked up by the service's
// full name in protoregistry.GlobalFiles, where the generated code of every
// service linked into the program registers itself; for generated code it
// is the file ServiceDesc.Metadata names. ok is false when the program has
// no such service (hand-written ServiceDescs, as in tests).
func serviceFileSet(service string) (set *descriptorpb.FileDescriptorSet, ok bool) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil, false
	}
	sd, isService := d.(protoreflect.ServiceDescriptor)
	if !isService {
		return nil, false
	}
	set = new(descriptorpb.FileDescriptorSet)
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] || fd.IsPlaceholder() {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(sd.ParentFile())
	return set, true
}

// publishSchemas writes the schema of each service this program has
// descriptors for to its schema key (no TTL: the schema outlives its
// servers, so tools can still describe a service that is down). It is
// written on every start, so the latest server to start wins. A service
// without a descriptor, or a failed write, is logged and skipped: the
// schema serves tools, and serving calls must not depend on it.
func (s *Server) publishSchemas(ctx context.Context, services []*serverService) {
	pipe := s.rdb.Pipeline()
	written := map[string]*redis.StatusCmd{}
	for _, svc := range services {
		set, ok := serviceFileSet(svc.name)
		if !ok {
			s.log.Debug("rpr: not publishing a schema: no descriptor for the service is linked into this program (hand-written ServiceDesc?); rpr call and rpr describe will not know it",
				"service", svc.name)
			continue
		}
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
		if err != nil {
			s.log.Warn("rpr: not publishing the schema", "service", svc.name, "error", err)
			continue
		}
		written[svc.name] = pipe.Set(ctx, s.keys.Schema(svc.name), raw, 0)
	}
	if len(written) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx)
	for name, cmd := range written {
		if err := cmd.Err(); err != nil {
			s.log.Warn("rpr: publish schema failed; rpr call and rpr describe may not know the service", "service", name, "key", s.keys.Schema(name), "error", err)
		}
	}
}

// ListServices returns, sorted, the names of the services that have a
// published schema or worker heartbeats under prefix ("" for
// DefaultPrefix). It scans the store.Keyspace (SCAN, never KEYS), on every master
// of a Redis Cluster; meant for operators' tools, not for hot paths.
func ListServices(ctx context.Context, client redis.UniversalClient, prefix string) ([]string, error) {
	keys := store.NewKeyspace(prefix)
	found := map[string]bool{}
	err := scanEveryMaster(ctx, client, keys.ServicePatterns(), func(key string) {
		if name, ok := keys.ServiceOf(key); ok {
			found[name] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("rpr: list services under prefix %q: %w", keys.Prefix(), err)
	}
	return slices.Sorted(maps.Keys(found)), nil
}

// LoadSchemaFiles reads the schema a server of service published under
// prefix ("" for DefaultPrefix) and builds a registry of its files: the
// file defining the service and everything it imports. The registry is
// new and separate from protoregistry.GlobalFiles, so the caller needs none
// of the service's generated code: pair it with dynamicpb (and
// dynamicpb.NewTypes for protojson and Any). The error wraps ErrNoSchema
// when nothing was published.
func LoadSchemaFiles(ctx context.Context, rdb redis.UniversalClient, prefix, service string) (*protoregistry.Files, error) {
	prefix = orDefaultPrefix(prefix)
	key := store.NewKeyspace(prefix).Schema(service)
	raw, err := rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("rpr: service %s: %w under prefix %q (key %s is absent): servers publish it each time they start, but only those built with an rpr that has rpr ls/describe/call; start a server of %s built with such an rpr once (or check the service name and the prefix)",
			service, ErrNoSchema, prefix, key, service)
	}
	if err != nil {
		return nil, fmt.Errorf("rpr: read the schema of %s from %s: %w", service, key, err)
	}
	set := new(descriptorpb.FileDescriptorSet)
	if err := proto.Unmarshal(raw, set); err != nil {
		return nil, fmt.Errorf("rpr: the schema of %s at %s is not a FileDescriptorSet: %v (restart a server of the service to publish it again)", service, key, err)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("rpr: the schema of %s at %s is incomplete or invalid: %v (restart a server of the service to publish it again)", service, key, err)
	}
	return files, nil
}

// LoadSchema returns the descriptor of service from the schema its servers
// published under prefix ("" for DefaultPrefix); see LoadSchemaFiles. Its
// methods' Input and Output describe the messages, for dynamicpb.
func LoadSchema(ctx context.Context, rdb redis.UniversalClient, prefix, service string) (protoreflect.ServiceDescriptor, error) {
	files, err := LoadSchemaFiles(ctx, rdb, prefix, service)
	if err != nil {
		return nil, err
	}
	return ServiceInFiles(files, service)
}

// ServiceInFiles finds service in files, a registry LoadSchemaFiles built.
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
