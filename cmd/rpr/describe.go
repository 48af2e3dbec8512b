package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// schemaTarget is a service, and maybe one of its methods, as the schema
// its servers published describes it. Everything in it comes from Redis:
// the command line never consults the Go types linked into rpr, so it calls
// and describes services it was not built with.
type schemaTarget struct {
	files   *protoregistry.Files
	types   *dynamicpb.Types // the schema's message types, for protojson and Any
	service protoreflect.ServiceDescriptor
	method  protoreflect.MethodDescriptor // nil when only the service was named
}

// loadTarget resolves "pkg.Service", "pkg.Service/Method" or
// "pkg.Service.Method" against the schemas published in Redis, at url
// (the --redis URL, for messages). A name that cannot be one is exit
// status 2, as is Redis that cannot be read; a service Redis does not
// know, one without a published schema and a method its schema lacks
// are exit status 1.
func loadTarget(ctx context.Context, a *admin.Client, url, arg string) (*schemaTarget, error) {
	service, method, explicit := strings.Cut(arg, "/")
	if explicit && (service == "" || method == "" || strings.Contains(method, "/")) {
		return nil, badInput(fmt.Errorf("%q is not a method name: write pkg.Service/Method, e.g. examples.greeter.v1.Greeter/SayHello", arg))
	}
	if err := checkServiceName(service, "examples.greeter.v1.Greeter/SayHello"); err != nil {
		return nil, err
	}
	files, err := a.Service(service).SchemaFiles(ctx)
	if !explicit && errors.Is(err, admin.ErrNoSchema) {
		// Perhaps pkg.Service.Method, as grpcurl accepts.
		if i := strings.LastIndexByte(arg, '.'); i > 0 {
			if alt, altErr := a.Service(arg[:i]).SchemaFiles(ctx); altErr == nil {
				files, err, service, method = alt, nil, arg[:i], arg[i+1:]
			}
		}
	}
	if errors.Is(err, admin.ErrNoSchema) {
		return nil, noSchema(ctx, a, url, service, err)
	}
	if err != nil {
		return nil, badInput(err)
	}
	sd, err := admin.ServiceInFiles(files, service)
	if err != nil {
		return nil, failed(err)
	}
	t := &schemaTarget{files: files, types: dynamicpb.NewTypes(files), service: sd}
	if method != "" {
		t.method = sd.Methods().ByName(protoreflect.Name(method))
		if t.method == nil {
			return nil, failed(fmt.Errorf("service %s has no method %q; its methods: %s (rpr describe %s shows them)", service, method, strings.Join(methodNames(sd), ", "), service))
		}
	}
	return t, nil
}

// noSchema is the error for a service whose schema Redis does not hold
// (schemaErr wraps admin.ErrNoSchema): the unknown-service error when
// Redis knows nothing of it, else schemaErr with where rpr looked (the
// redacted URL and its database, the prefix) and the services known
// there. Both are exit status 1.
func noSchema(ctx context.Context, a *admin.Client, url, service string, schemaErr error) error {
	names, err := a.Services(ctx)
	if err != nil {
		return badInput(err)
	}
	if !slices.Contains(names, service) {
		return failed(unknownService(a, url, service, names))
	}
	return failed(fmt.Errorf("%w\n  looked in %s under prefix %q; services known there: %s", schemaErr, redisWhere(url), a.Prefix(), strings.Join(names, ", ")))
}

// redisWhere names the Redis of url for messages: redacted, with the
// database of a single server's URL spelled out.
func redisWhere(url string) string {
	shown := tunnel.RedactURL(url)
	u, err := neturl.Parse(url)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || strings.Contains(u.Host, ",") {
		return shown
	}
	db := strings.Trim(u.Path, "/")
	if db == "" {
		db = "0"
	}
	return shown + " (database " + db + ")"
}

func methodNames(sd protoreflect.ServiceDescriptor) []string {
	var names []string
	for i := range sd.Methods().Len() {
		names = append(names, string(sd.Methods().Get(i).Name()))
	}
	return names
}

func newDescribeCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	var output string
	cmd := &cobra.Command{
		Use:   "describe pkg.Service[/Method]",
		Short: "Print a service's or method's schema, as its servers published it",
		Long: `describe prints the schema a service's servers published to Redis when they
started, in .proto-like text: the service and its methods with their
options, then the request and response messages and every message and enum
they use (types are named in full). No local .proto file is needed.

-o json prints the descriptors instead, as protobuf JSON with the .proto
field names (google.protobuf.ServiceDescriptorProto, MethodDescriptorProto,
DescriptorProto): the service or method, and the request and response
messages of its methods.`,
		Example: `  rpr describe examples.greeter.v1.Greeter
  rpr describe examples.greeter.v1.Greeter/SayHello
  rpr describe examples.greeter.v1.Greeter -o json | jq -r '.service.method[].name'`,
		Args:              usageArgs(1, 1, "rpr describe pkg.Service[/Method], e.g. rpr describe examples.greeter.v1.Greeter"),
		ValidArgsFunction: completePatterns(&rf, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			target, err := loadTarget(ctx, a, rf.url, args[0])
			if err != nil {
				return err
			}
			if output == "json" {
				return describeJSON(cmd.OutOrStdout(), target)
			}
			describe(cmd.OutOrStdout(), target)
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

// describe prints the target in .proto-like text.
func describe(out io.Writer, t *schemaTarget) {
	p := &protoPrinter{out: out, types: t.types, printed: map[protoreflect.FullName]bool{}}
	sd := t.service
	fmt.Fprintf(out, "// %s, from %s\n", sd.FullName(), sd.ParentFile().Path())
	if t.method == nil {
		fmt.Fprintf(out, "service %s {\n", sd.FullName())
		var opts strings.Builder
		(&protoPrinter{out: &opts, types: p.types}).options(sd.Options(), "  ")
		if opts.Len() > 0 {
			fmt.Fprintf(out, "%s\n", opts.String())
		}
		for i := range sd.Methods().Len() {
			p.method(sd.Methods().Get(i), "  ")
		}
		fmt.Fprintln(out, "}")
	} else {
		p.method(t.method, "")
	}
	for len(p.queue) > 0 {
		d := p.queue[0]
		p.queue = p.queue[1:]
		fmt.Fprintln(out)
		switch d := d.(type) {
		case protoreflect.MessageDescriptor:
			p.message(d)
		case protoreflect.EnumDescriptor:
			p.enum(d)
		}
	}
}

// protoPrinter writes descriptors as .proto-like text. Types are named in
// full, and every message or enum it names is queued to be printed after,
// once, except the google.protobuf well-known types everyone knows.
type protoPrinter struct {
	out     io.Writer
	types   *dynamicpb.Types
	printed map[protoreflect.FullName]bool
	queue   []protoreflect.Descriptor
}

func (p *protoPrinter) enqueue(d protoreflect.Descriptor) {
	if p.printed[d.FullName()] || d.ParentFile().Package() == "google.protobuf" {
		return
	}
	p.printed[d.FullName()] = true
	p.queue = append(p.queue, d)
}

func (p *protoPrinter) method(md protoreflect.MethodDescriptor, indent string) {
	stream := func(yes bool) string {
		if yes {
			return "stream "
		}
		return ""
	}
	fmt.Fprintf(p.out, "%srpc %s(%s%s) returns (%s%s)", indent, md.Name(),
		stream(md.IsStreamingClient()), md.Input().FullName(), stream(md.IsStreamingServer()), md.Output().FullName())
	var opts strings.Builder
	(&protoPrinter{out: &opts, types: p.types}).options(md.Options(), indent+"  ")
	if opts.Len() == 0 {
		fmt.Fprintln(p.out, ";")
	} else {
		fmt.Fprintf(p.out, " {\n%s%s}\n", opts.String(), indent)
	}
	p.enqueue(md.Input())
	p.enqueue(md.Output())
}

func (p *protoPrinter) message(md protoreflect.MessageDescriptor) {
	fmt.Fprintf(p.out, "message %s {\n", md.FullName())
	p.options(md.Options(), "  ")
	fields := md.Fields()
	doneOneofs := map[protoreflect.FullName]bool{}
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if doneOneofs[od.FullName()] {
				continue
			}
			doneOneofs[od.FullName()] = true
			fmt.Fprintf(p.out, "  oneof %s {\n", od.Name())
			for j := range od.Fields().Len() {
				p.field(od.Fields().Get(j), "    ")
			}
			fmt.Fprintln(p.out, "  }")
			continue
		}
		p.field(fd, "  ")
	}
	for i := range md.ReservedRanges().Len() {
		r := md.ReservedRanges().Get(i)
		if r[1]-r[0] == 1 {
			fmt.Fprintf(p.out, "  reserved %d;\n", r[0])
		} else {
			fmt.Fprintf(p.out, "  reserved %d to %d;\n", r[0], r[1]-1)
		}
	}
	fmt.Fprintln(p.out, "}")
}

func (p *protoPrinter) field(fd protoreflect.FieldDescriptor, indent string) {
	var typ string
	switch {
	case fd.IsMap():
		typ = fmt.Sprintf("map<%s, %s>", p.typeName(fd.MapKey()), p.typeName(fd.MapValue()))
	case fd.IsList():
		typ = "repeated " + p.typeName(fd)
	case fd.Cardinality() == protoreflect.Required:
		typ = "required " + p.typeName(fd)
	case fd.HasOptionalKeyword():
		typ = "optional " + p.typeName(fd)
	default:
		typ = p.typeName(fd)
	}
	fmt.Fprintf(p.out, "%s%s %s = %d%s;\n", indent, typ, fd.Name(), fd.Number(), p.inlineOptions(fd.Options()))
}

// typeName names a field's type, queueing message and enum types.
func (p *protoPrinter) typeName(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.Message() != nil:
		p.enqueue(fd.Message())
		return string(fd.Message().FullName())
	case fd.Enum() != nil:
		p.enqueue(fd.Enum())
		return string(fd.Enum().FullName())
	}
	return fd.Kind().String()
}

func (p *protoPrinter) enum(ed protoreflect.EnumDescriptor) {
	fmt.Fprintf(p.out, "enum %s {\n", ed.FullName())
	p.options(ed.Options(), "  ")
	for i := range ed.Values().Len() {
		v := ed.Values().Get(i)
		fmt.Fprintf(p.out, "  %s = %d%s;\n", v.Name(), v.Number(), p.inlineOptions(v.Options()))
	}
	fmt.Fprintln(p.out, "}")
}

// options writes one "option name = value;" line per option set.
func (p *protoPrinter) options(opts proto.Message, indent string) {
	for _, o := range p.setOptions(opts) {
		fmt.Fprintf(p.out, "%soption %s = %s;\n", indent, o[0], o[1])
	}
}

// inlineOptions formats a field's or enum value's options as " [a = b]".
func (p *protoPrinter) inlineOptions(opts proto.Message) string {
	set := p.setOptions(opts)
	if len(set) == 0 {
		return ""
	}
	parts := make([]string, len(set))
	for i, o := range set {
		parts[i] = o[0] + " = " + o[1]
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

// setOptions lists the options set in opts, by field number, as name and
// value pairs. Custom options are read with the schema's own extension
// definitions, so they show whether or not rpr was built with them.
func (p *protoPrinter) setOptions(opts proto.Message) [][2]string {
	if opts == nil || !opts.ProtoReflect().IsValid() {
		return nil
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(opts)
	if err != nil {
		return nil
	}
	msg := opts.ProtoReflect().Type().New().Interface()
	if err := (proto.UnmarshalOptions{Resolver: p.types}).Unmarshal(raw, msg); err != nil {
		msg = opts
	}
	var out [][2]string
	for _, fd := range sortedFields(msg.ProtoReflect()) {
		name := string(fd.Name())
		if fd.IsExtension() {
			name = "(" + string(fd.FullName()) + ")"
		}
		out = append(out, [2]string{name, textValue(fd, msg.ProtoReflect().Get(fd))})
	}
	return out
}

// sortedFields returns the fields set in m by field number.
func sortedFields(m protoreflect.Message) []protoreflect.FieldDescriptor {
	var fds []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fds = append(fds, fd)
		return true
	})
	slices.SortFunc(fds, func(a, b protoreflect.FieldDescriptor) int { return int(a.Number()) - int(b.Number()) })
	return fds
}

// textValue formats v in protobuf text format, deterministically (prototext
// deliberately varies its spacing).
func textValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.IsList():
		l := v.List()
		parts := make([]string, l.Len())
		for i := range l.Len() {
			parts[i] = singleValue(fd, l.Get(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case fd.IsMap():
		var parts []string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			parts = append(parts, fmt.Sprintf("{key: %s, value: %s}", singleValue(fd.MapKey(), k.Value()), singleValue(fd.MapValue(), mv)))
			return true
		})
		slices.Sort(parts)
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return singleValue(fd, v)
}

func singleValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		m := v.Message()
		var parts []string
		for _, f := range sortedFields(m) {
			name := string(f.Name())
			if f.IsExtension() {
				name = "[" + string(f.FullName()) + "]"
			}
			parts = append(parts, name+": "+textValue(f, m.Get(f)))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.StringKind:
		return strconv.Quote(v.String())
	case protoreflect.BytesKind:
		return strconv.Quote(string(v.Bytes()))
	}
	return v.String()
}
