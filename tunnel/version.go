package tunnel

import "github.com/rprtunnel/rpr/internal/version"

// Version is the release of rpr this package belongs to, as "v0.1.0":
// the same version protoc-gen-rpr --version and rpr version print, so
// that a deployment can check that its generated code, its runtime and
// its command line come from one release.
const Version = version.Version
