package main

// rpr acl: print the Redis ACL users that confine each role (a server of
// services, a caller of services, an operator) to what it needs. The
// rules come from package admin/acl; this command needs no Redis.

import (
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin/acl"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

func newACLCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Print the Redis ACL users for a server, a caller or an operator",
		Long: `acl prints ready-to-paste ACL SETUSER commands (Redis 7 or later) that give
each rpr role the rights it needs and no more: a server of some services, a
caller of some services, an operator of the deployment. It reads nothing
from Redis: the rules depend on --prefix and the service names only. Run
the printed command with redis-cli on the Redis (on every node of a
Cluster: ACL users are not replicated), after replacing the password
placeholder, or give --password-placeholder the text to print there.

A caller can send requests, withdraw the ones it gave up on, read its own
response streams and the services' routes, limits and workers; it never
reads a request stream (only XPENDING's ids and counts), and cannot read or
join the workers group, beat into the workers hash, or change routes,
limits or the shard count. A server can serve its services' queues and
write (not read) callers' response streams; it cannot change routes or
limits. With --client-id, a caller's response streams are only those of
clients whose ClientOptions.ID starts with that prefix. For the tunnel's
services (rpr.tunnel.v1.HTTP, rpr.tunnel.v1.GRPC) the users also read the
upstream tables and report the version applied: "rpr acl caller" prints
rpr ingress's user, "rpr acl server" rpr egress's. See docs/security.md
for what ACLs cannot separate within a service.`,
		Example: `  rpr acl server acme.orders.v1.Orders
  rpr acl caller acme.orders.v1.Orders --client-id shop-
  rpr acl caller acme.orders.v1.Orders acme.billing.v1.Billing --user rpr-shop
  rpr acl server rpr.tunnel.v1.HTTP rpr.tunnel.v1.GRPC --user rpr-egress
  rpr acl operator --prefix staging:v1:
  rpr acl server acme.orders.v1.Orders -o json`,
	}
	return commandGroup(cmd, "server, caller or operator",
		newACLRoleCommand(acl.Server), newACLRoleCommand(acl.Caller), newACLRoleCommand(acl.Operator))
}

// newACLRoleCommand is "rpr acl server|caller|operator".
func newACLRoleCommand(role acl.Role) *cobra.Command {
	var opts acl.Options
	var output string
	usage := fmt.Sprintf("rpr acl %s SERVICE..., e.g. rpr acl %s acme.orders.v1.Orders", role, role)
	use, short, minArgs, maxArgs := string(role)+" SERVICE...", "Print the ACL user of a "+string(role)+" of services", 1, -1
	if role == acl.Operator {
		usage = "rpr acl operator [--prefix PREFIX]"
		use, short, minArgs, maxArgs = "operator", "Print the ACL user of an operator of the whole deployment", 0, 0
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  usageArgs(minArgs, maxArgs, usage),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			// The tunnel's services come with their upstream tables.
			opts.Upstreams = slices.ContainsFunc(args, func(s string) bool {
				return s == upstream.HTTPService || s == upstream.GRPCService
			})
			var u acl.User
			var err error
			switch role {
			case acl.Server:
				u, err = acl.ForServer(args, opts)
			case acl.Caller:
				u, err = acl.ForCaller(args, opts)
			default:
				u, err = acl.ForOperator(opts)
			}
			if err != nil {
				return badInput(err)
			}
			return printACLUser(cmd.OutOrStdout(), u, output)
		},
	}
	registerPrefix(cmd, &opts.Prefix)
	userHelp := "name of the Redis user (default rpr-" + string(role) + "-SERVICE; required with several services)"
	if role == acl.Operator {
		userHelp = "name of the Redis user (default rpr-operator)"
	}
	cmd.Flags().StringVar(&opts.User, "user", "", userHelp)
	cmd.Flags().StringVar(&opts.Password, "password-placeholder", acl.DefaultPassword, "text printed as the user's password (>TEXT); replace it before running the command")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	if role == acl.Caller {
		cmd.Flags().StringVar(&opts.ClientID, "client-id", "", "prefix of the callers' ClientOptions.ID: only their response streams (default: every client's)")
	}
	return cmd
}

// aclUserJSON is one user in -o json.
type aclUserJSON struct {
	User     string   `json:"user"`
	Role     string   `json:"role"`
	Prefix   string   `json:"prefix"`
	Services []string `json:"services,omitempty"`
	Rules    []string `json:"rules"`
	Command  string   `json:"command"`
}

func printACLUser(out io.Writer, u acl.User, output string) error {
	if output == "json" {
		return writeJSONUnescaped(out, aclUserJSON{User: u.Name, Role: string(u.Role), Prefix: u.Prefix, Services: u.Services, Rules: u.Rules, Command: u.Command()})
	}
	_, err := fmt.Fprintln(out, u.Command())
	return err
}
