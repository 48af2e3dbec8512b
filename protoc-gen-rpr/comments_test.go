package main

import "testing"

// TestIsDeclaration checks which SourceCodeInfo paths keep their comments
// in ServiceDesc.SourceInfo.
func TestIsDeclaration(t *testing.T) {
	for _, tt := range []struct {
		path []int32
		want bool
	}{
		{[]int32{6, 0}, true},             // a service
		{[]int32{6, 0, 2, 3}, true},       // a method
		{[]int32{4, 1, 2, 0}, true},       // a field
		{[]int32{4, 1, 3, 0, 2, 1}, true}, // a nested message's field
		{[]int32{4, 0, 8, 0}, true},       // a oneof
		{[]int32{5, 0, 2, 1}, true},       // an enum value
		{[]int32{7, 0}, true},             // an extension
		{[]int32{12}, false},              // syntax
		{[]int32{6, 0, 1}, false},         // a service's name
		{[]int32{6, 0, 3}, false},         // a service's options
		{[]int32{6, 0, 2, 0, 4}, false},   // a method's options
		{[]int32{8, 11}, false},           // go_package
		{nil, false},
	} {
		if got := isDeclaration(tt.path); got != tt.want {
			t.Errorf("isDeclaration(%v) = %v, want %v", tt.path, got, tt.want)
		}
	}
}
