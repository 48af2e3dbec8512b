// Package version holds the one version of rpr: of the runtime
// (tunnel.Version), of the protoc-gen-rpr plugin (its --version and the
// header of every file it generates) and of the rpr command line (rpr
// version). Releases change Version here alone.
package version

// Version is the release of rpr this tree builds, a semantic version
// with a leading "v".
const Version = "v0.1.0"
