package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rprtunnel/rpr/tunnel"
)

// Authenticated callers on the command line: `rpr keys new` makes a
// caller's secret; --caller and --caller-secret-file make `rpr call` and
// `rpr ingress` sign as that caller; --trust makes `rpr egress` take only
// the callers a trust file lists.

func newKeysCommand() *cobra.Command {
	keys := &cobra.Command{
		Use:   "keys",
		Short: "Make caller secrets for authenticated callers (tunnel.Credentials, tunnel.Trust)",
	}
	return commandGroup(keys, "new", &cobra.Command{
		Use:   "new CALLER",
		Short: "Print a new random secret for CALLER, as a line of a trust file",
		Long: `Print a new random 32-byte secret for CALLER as one line of a trust file:

  CALLER SECRET

Give the secret to the caller (rpr call --caller CALLER --caller-secret-file F,
where F holds the SECRET alone, or tunnel.Credentials in Go) and the line to
the servers that trust it (rpr egress --trust FILE, or tunnel.Trust). Append
the methods the caller may call to the line to restrict it:

  CALLER SECRET pkg.v1.Orders/Get pkg.v1.Orders/*

Keep the secret like a password: whoever has it can call as CALLER.`,
		Example: `  rpr keys new billing >> trust.txt`,
		Args:    usageArgs(1, 1, "rpr keys new CALLER, e.g. rpr keys new billing"),
		RunE: func(cmd *cobra.Command, args []string) error {
			creds := &tunnel.Credentials{Caller: args[0], Secret: tunnel.NewCallerSecret()}
			if err := creds.Validate(); err != nil {
				return badInput(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", creds.Caller, tunnel.EncodeCallerSecret(creds.Secret))
			return nil
		},
	})
}

// callerFlags are --caller, --caller-secret-file and --seal.
type callerFlags struct {
	caller, secretFile string
	seal               bool
}

func (f *callerFlags) register(flags *pflag.FlagSet) {
	flags.StringVar(&f.caller, "caller", "", "sign requests as this caller (servers with a trust file verify it); needs --caller-secret-file")
	flags.StringVar(&f.secretFile, "caller-secret-file", "", "file holding --caller's secret (rpr keys new prints one)")
	flags.BoolVar(&f.seal, "seal", false, "with --caller: encrypt payloads and metadata in Redis; streaming calls (and in rpr ingress stream-mode routes, server-sent events and gRPC passthrough) cannot be sealed and are refused")
}

// credentials returns the Credentials the flags name, nil without
// --caller.
func (f *callerFlags) credentials() (*tunnel.Credentials, error) {
	switch {
	case f.caller == "" && f.secretFile == "" && !f.seal:
		return nil, nil
	case f.caller == "" || f.secretFile == "":
		return nil, errors.New("--caller, --caller-secret-file (and --seal) go together: give --caller and --caller-secret-file")
	}
	text, err := os.ReadFile(f.secretFile)
	if err != nil {
		return nil, fmt.Errorf("--caller-secret-file: %w", err)
	}
	secret, err := tunnel.ParseCallerSecret(string(text))
	if err != nil {
		return nil, fmt.Errorf("--caller-secret-file %s: %w", f.secretFile, err)
	}
	creds := &tunnel.Credentials{Caller: f.caller, Secret: secret, Seal: f.seal}
	if err := creds.Validate(); err != nil {
		return nil, err
	}
	return creds, nil
}

// readTrustFile reads a trust file: one trusted caller per line, "CALLER
// SECRET [METHOD...]", where each METHOD ("pkg.Svc/Method", "pkg.Svc/*"
// or "*") is one the caller may call (none: every method); blank lines and
// lines starting with # are skipped.
func readTrustFile(path string) (*tunnel.Trust, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--trust: %w", err)
	}
	defer file.Close()
	trust := &tunnel.Trust{Callers: map[string][]byte{}}
	var grants []tunnel.Grant
	restricted := false
	scanner := bufio.NewScanner(file)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return nil, fmt.Errorf("--trust %s:%d: want CALLER SECRET [METHOD...] (rpr keys new CALLER prints a line)", path, n)
		}
		caller := fields[0]
		if _, dup := trust.Callers[caller]; dup {
			return nil, fmt.Errorf("--trust %s:%d: caller %q is listed twice", path, n, caller)
		}
		secret, err := tunnel.ParseCallerSecret(fields[1])
		if err != nil {
			return nil, fmt.Errorf("--trust %s:%d: %w", path, n, err)
		}
		trust.Callers[caller] = secret
		methods := fields[2:]
		if len(methods) == 0 {
			methods = []string{"*"}
		} else {
			restricted = true
		}
		for _, m := range methods {
			grants = append(grants, tunnel.Grant{Caller: caller, Method: m})
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("--trust %s: %w", path, err)
	}
	if len(trust.Callers) == 0 {
		return nil, fmt.Errorf("--trust %s lists no callers (rpr keys new CALLER prints a line)", path)
	}
	if restricted {
		trust.Allow = grants
	}
	return trust, nil
}
