package compilecheck

import (
	"strings"
	"testing"

	basicv1 "example.com/rprtest/basic/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestSourceInfo checks that ServiceDesc.SourceInfo holds the .proto
// comments of the file and fits the descriptor protoc-gen-go registers, as
// the server that publishes them needs.
func TestSourceInfo(t *testing.T) {
	if basicv1.Orders_ServiceDesc.SourceInfo == "" || basicv1.Orders_ServiceDesc.SourceInfo != basicv1.LegacyOrders_ServiceDesc.SourceInfo {
		t.Fatalf("the services of basic.proto carry no or different comments")
	}
	info := new(descriptorpb.SourceCodeInfo)
	if err := proto.Unmarshal([]byte(basicv1.Orders_ServiceDesc.SourceInfo), info); err != nil {
		t.Fatal(err)
	}
	for _, loc := range info.GetLocation() {
		if len(loc.GetLeadingDetachedComments()) > 0 || (loc.LeadingComments == nil && loc.TrailingComments == nil) {
			t.Errorf("location %v: want a leading or trailing comment and no detached ones: %v", loc.GetPath(), loc)
		}
	}
	fdp := protodesc.ToFileDescriptorProto(basicv1.File_rprtest_basic_v1_basic_proto)
	fdp.SourceCodeInfo = info
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatalf("the comments do not fit the descriptor of %s: %v", fdp.GetName(), err)
	}
	sd := fd.Services().ByName("Orders")
	if got := fd.SourceLocations().ByDescriptor(sd).LeadingComments; !strings.HasPrefix(got, " Orders keeps orders.\n") {
		t.Errorf("the comment of Orders is %q", got)
	}
	if got := fd.SourceLocations().ByDescriptor(sd.Methods().ByName("GetOrder")).LeadingComments; got != " GetOrder returns one order.\n" {
		t.Errorf("the comment of GetOrder is %q", got)
	}
}
