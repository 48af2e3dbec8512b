package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/tunnel"
)

// newVersionCommand is "rpr version": the one version of rpr
// (tunnel.Version), which protoc-gen-rpr --version prints too.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print rpr's version (the same as protoc-gen-rpr --version and tunnel.Version)",
		Long: `version prints the release of rpr this command line was built from, with the
Go version and platform. The runtime (tunnel.Version) and the code generator
(protoc-gen-rpr --version) of one release print the same version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "rpr %s (%s, %s/%s)\n", tunnel.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
