package tunnel

// The service registry: servers publish each service's schema (its
// FileDescriptorSet) to Redis when they start, next to the worker
// heartbeats they already publish, so that operators' tools (package
// admin, and rpr ls, rpr describe, rpr call on it) can find services and
// call them with no local .proto files, as grpcurl does with gRPC
// reflection.

import (
	"context"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// serviceFileSet returns the FileDescriptorSet of the .proto file that
// defines service, with every file it imports, transitively, dependencies
// first (as protoc writes them). The file is looked up by the service's
// full name in protoregistry.GlobalFiles, where the generated code of every
// service linked into the program registers itself; for generated code it
// is the file ServiceDesc.File names. ok is false when the program has
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
