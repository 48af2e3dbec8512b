package tunnel

// The service registry: servers publish each service's schema (its
// FileDescriptorSet) to Redis when they start, next to the worker
// heartbeats they already publish, so that operators' tools (package
// admin, and rpr ls, rpr describe, rpr call on it) can find services and
// call them with no local .proto files, as grpcurl does with gRPC
// reflection.

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rprtunnel/rpr/internal/wire"
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

// serviceSchema returns the schema of service as servers publish it (the
// deterministic encoding of serviceFileSet, with the comments of
// sourceInfo added to file, the service's .proto file) and its version,
// both empty when the program has no descriptor for it.
func serviceSchema(service, file, sourceInfo string, log *slog.Logger) ([]byte, string) {
	set, ok := serviceFileSet(service)
	if !ok {
		log.Debug("rpr: not publishing a schema: no descriptor for the service is linked into this program (hand-written ServiceDesc?); rpr call and rpr describe will not know it",
			"service", service)
		return nil, ""
	}
	if sourceInfo != "" {
		if err := addSourceInfo(set, file, sourceInfo); err != nil {
			log.Warn("rpr: publishing the schema without its .proto comments; regenerate the service's code with protoc-gen-go and protoc-gen-rpr together",
				"service", service, "file", file, "error", err)
		}
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		log.Warn("rpr: not publishing the schema", "service", service, "error", err)
		return nil, ""
	}
	return raw, wire.SchemaID(raw)
}

// addSourceInfo sets the SourceCodeInfo of file in set to sourceInfo (see
// ServiceDesc.SourceInfo), unless that makes set invalid; then it leaves
// set as it was and says why.
func addSourceInfo(set *descriptorpb.FileDescriptorSet, file, sourceInfo string) error {
	info := new(descriptorpb.SourceCodeInfo)
	if err := proto.Unmarshal([]byte(sourceInfo), info); err != nil {
		return fmt.Errorf("ServiceDesc.SourceInfo is not a SourceCodeInfo: %w", err)
	}
	for _, f := range set.File {
		if f.GetName() != file {
			continue
		}
		f.SourceCodeInfo = info
		if _, err := protodesc.NewFiles(set); err != nil {
			f.SourceCodeInfo = nil
			return fmt.Errorf("ServiceDesc.SourceInfo does not fit %s: %w", file, err)
		}
		return nil
	}
	return fmt.Errorf("the schema has no file %s, which ServiceDesc.File names", file)
}

// publishSchemas writes the schema of each of services into its schemas
// hash under its version, which this worker's record names, and to the
// schema key tools of earlier releases read (the last server to start
// wins there). Both live for wire.Retention after the worker's last beat;
// a beat that finds its version gone publishes it again. A failed write is
// logged and skipped: the schema serves tools, and serving calls must not
// depend on it.
func (s *Server) publishSchemas(ctx context.Context, services []*serverService) {
	pipe := s.rdb.Pipeline()
	written := map[string]*redis.IntCmd{}
	for _, svc := range services {
		if svc.schemaID == "" {
			continue
		}
		written[svc.name] = pipe.HSet(ctx, s.keys.Schemas(svc.name), svc.schemaID, svc.schema)
		pipe.PExpire(ctx, s.keys.Schemas(svc.name), wire.Retention)
		pipe.Set(ctx, s.keys.Schema(svc.name), svc.schema, wire.Retention)
	}
	if len(written) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx)
	for name, cmd := range written {
		if err := cmd.Err(); err != nil {
			s.log.Warn("rpr: publish schema failed; rpr call and rpr describe may not know the service", "service", name, "key", s.keys.Schemas(name), "error", err)
		}
	}
}
