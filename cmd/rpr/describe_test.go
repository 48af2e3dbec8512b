package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rprtunnel/rpr/internal/redistest"
)

func TestDescribe(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "greeter-describe-1")

	res := runCLI(t, "", "describe", "--redis", rs.URL(), greeterService)
	if res.code != 0 {
		t.Fatalf("describe: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, want := range []string{
		// The .proto comments, which the servers publish with the schema.
		"// Greeter answers greetings across the tunnel.\nservice examples.greeter.v1.Greeter {\n",
		"  // SayHello returns a greeting for the given name. An empty name is\n  // refused with INVALID_ARGUMENT.\n  rpc SayHello(",
		"// SayHelloRequest names who to greet.\nmessage examples.greeter.v1.SayHelloRequest {\n",
		"  string name = 1;\n  // Milliseconds the server waits before answering.\n  uint32 delay_ms = 2;\n",
		`  option (rpr.v1.service) = {biz_code: "GRT1"};`,
		"  rpc SayHello(examples.greeter.v1.SayHelloRequest) returns (examples.greeter.v1.SayHelloResponse) {\n    option (rpr.v1.method) = {timeout: {seconds: 5}};\n  }\n",
		"  rpc SlowHello(examples.greeter.v1.SlowHelloRequest) returns (examples.greeter.v1.SlowHelloResponse) {",
		"message examples.greeter.v1.SayHelloRequest {\n  string name = 1;\n}\n",
		"message examples.greeter.v1.SlowHelloResponse {\n  string message = 1;\n}\n",
		"  rpc Countdown(examples.greeter.v1.CountdownRequest) returns (stream examples.greeter.v1.CountdownResponse);\n",
		"  rpc Chat(stream examples.greeter.v1.ChatRequest) returns (stream examples.greeter.v1.ChatResponse);\n",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("describe output lacks %q:\n%s", want, res.stdout)
		}
	}

	res = runCLI(t, "", "describe", "--redis", rs.URL(), greeterService+"/SayHello")
	if res.code != 0 || !strings.Contains(res.stdout, "// SayHello returns a greeting") || strings.Contains(res.stdout, "SlowHello") ||
		!strings.Contains(res.stdout, "message examples.greeter.v1.SayHelloResponse {") {
		t.Errorf("describe method: exit %d, stdout %q", res.code, res.stdout)
	}

	res = runCLI(t, "", "describe", "--redis", rs.URL(), greeterService+"/Nope")
	if res.code != 1 || !strings.Contains(res.stderr, `no method "Nope"`) {
		t.Errorf("unknown method: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runCLI(t, "", "describe", "--redis", rs.URL(), "nope.v1.Nope")
	if res.code != 1 || !strings.Contains(res.stderr, "unknown service nope.v1.Nope; known: "+greeterService+" (rpr ls lists them)") {
		t.Errorf("unknown service: exit %d, stderr %q", res.code, res.stderr)
	}
}

// TestDescribeShapes checks the text for each kind of field, from a schema
// written to Redis directly (no Go code of it exists).
func TestDescribeShapes(t *testing.T) {
	rs := redistest.Start(t)
	const src = `
file: {
  name: "rprtest/shapes/v1/shapes.proto"
  package: "rprtest.shapes.v1"
  dependency: "google/protobuf/duration.proto"
  syntax: "proto3"
  message_type: {
    name: "Order"
    field: {name: "id" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "id"}
    field: {name: "tags" number: 2 label: LABEL_REPEATED type: TYPE_STRING json_name: "tags"}
    field: {name: "attrs" number: 3 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".rprtest.shapes.v1.Order.AttrsEntry" json_name: "attrs"}
    field: {name: "line" number: 4 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".rprtest.shapes.v1.Order.Line" json_name: "line"}
    field: {name: "status" number: 5 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".rprtest.shapes.v1.Status" json_name: "status"}
    field: {name: "ttl" number: 6 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.Duration" json_name: "ttl"}
    field: {name: "note" number: 7 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "note" proto3_optional: true oneof_index: 1}
    field: {name: "card" number: 8 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "card" oneof_index: 0}
    field: {name: "cash" number: 9 label: LABEL_OPTIONAL type: TYPE_BOOL json_name: "cash" oneof_index: 0 options: {deprecated: true}}
    nested_type: {
      name: "AttrsEntry"
      field: {name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "key"}
      field: {name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 json_name: "value"}
      options: {map_entry: true}
    }
    nested_type: {
      name: "Line"
      field: {name: "sku" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "sku"}
    }
    oneof_decl: {name: "payment"}
    oneof_decl: {name: "_note"}
    reserved_range: {start: 10 end: 11}
    reserved_range: {start: 20 end: 30}
  }
  enum_type: {
    name: "Status"
    value: {name: "STATUS_UNSPECIFIED" number: 0}
    value: {name: "STATUS_OPEN" number: 1}
  }
  service: {
    name: "Orders"
    options: {deprecated: true}
    method: {
      name: "Get" input_type: ".rprtest.shapes.v1.Order" output_type: ".rprtest.shapes.v1.Order"
      options: {idempotency_level: NO_SIDE_EFFECTS}
    }
  }
  source_code_info: {
    location: {path: [4, 0, 8, 0] span: [20, 2, 25, 3] leading_comments: " How it is paid.\n\n Cards or cash.\n"}
    location: {path: [5, 0, 2, 1] span: [30, 2, 20] trailing_comments: " open for changes \n"}
  }
}`
	set := new(descriptorpb.FileDescriptorSet)
	if err := prototext.Unmarshal([]byte(src), set); err != nil {
		t.Fatal(err)
	}
	set.File = append([]*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(durationpb.File_google_protobuf_duration_proto)}, set.File...)
	raw, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Client(t).Set(t.Context(), "rpr:v1:{rprtest.shapes.v1.Orders}:schema", raw, 0).Err(); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, "", "describe", "--redis", rs.URL(), "rprtest.shapes.v1.Orders")
	const want = `// rprtest.shapes.v1.Orders, from rprtest/shapes/v1/shapes.proto
service rprtest.shapes.v1.Orders {
  option deprecated = true;

  rpc Get(rprtest.shapes.v1.Order) returns (rprtest.shapes.v1.Order) {
    option idempotency_level = NO_SIDE_EFFECTS;
  }
}

message rprtest.shapes.v1.Order {
  string id = 1;
  repeated string tags = 2;
  map<string, int64> attrs = 3;
  repeated rprtest.shapes.v1.Order.Line line = 4;
  rprtest.shapes.v1.Status status = 5;
  google.protobuf.Duration ttl = 6;
  optional string note = 7;
  // How it is paid.
  //
  // Cards or cash.
  oneof payment {
    string card = 8;
    bool cash = 9 [deprecated = true];
  }
  reserved 10;
  reserved 20 to 29;
}

message rprtest.shapes.v1.Order.Line {
  string sku = 1;
}

enum rprtest.shapes.v1.Status {
  STATUS_UNSPECIFIED = 0;
  // open for changes
  STATUS_OPEN = 1;
}
`
	if res.code != 0 || res.stdout != want {
		t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", res.code, res.stderr, res.stdout, want)
	}
}

// TestNoPublishedSchemaSaysWhere: for a service Redis knows (by its
// workers) but holds no schema of, describe and call say where they
// looked, the Redis and its database, and which services are known there.
func TestNoPublishedSchemaSaysWhere(t *testing.T) {
	rs := redistest.Start(t)
	heartbeat(t, rs, "old.v1.Legacy")
	startGreeter(t, rs, "schema-where")
	for _, args := range [][]string{{"describe", "old.v1.Legacy"}, {"call", "old.v1.Legacy/Get", "{}"}} {
		res := runCLI(t, "", append(args, "--redis", rs.URL())...)
		for _, want := range []string{"no published schema", "looked in " + rs.URL() + " (database 0) under prefix \"rpr:v1:\"", "services known there: " + greeterService + ", old.v1.Legacy"} {
			if res.code != 1 || !strings.Contains(res.stderr, want) {
				t.Errorf("rpr %s: want exit 1 and %q; %v", args[0], want, res)
			}
		}
	}
}
