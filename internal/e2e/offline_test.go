package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// missingModule returns the module@version a go command's output says it
// could not look up offline, or "".
func missingModule(out string) string {
	const refused = ": module lookup disabled by GOPROXY=off"
	before, _, ok := strings.Cut(out, refused)
	if !ok {
		return ""
	}
	fields := strings.Fields(before)
	if len(fields) == 0 || !strings.Contains(fields[len(fields)-1], "@") {
		return ""
	}
	return fields[len(fields)-1]
}

// onlineEnv is env with the module proxy and checksum database of this
// process's environment (their defaults when it names none) in place of
// GOPROXY=off and GOSUMDB=off.
func onlineEnv(env []string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "GOPROXY=") || strings.HasPrefix(kv, "GOSUMDB=")
	})
	for _, key := range []string{"GOPROXY", "GOSUMDB"} {
		if v, ok := os.LookupEnv(key); ok && v != "off" {
			out = append(out, key+"="+v)
		}
	}
	return out
}

func TestMissingModule(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"go: go.lsp.dev/uri@v0.3.0 requires\n\tgithub.com/google/go-cmp@v0.4.0: module lookup disabled by GOPROXY=off\n", "github.com/google/go-cmp@v0.4.0"},
		{"go: example.com/x@v1.2.3: module lookup disabled by GOPROXY=off", "example.com/x@v1.2.3"},
		{"go: module lookup disabled by GOPROXY=off", ""},
		{"go: updates to go.mod needed", ""},
	} {
		if got := missingModule(tc.out); got != tc.want {
			t.Errorf("missingModule(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
