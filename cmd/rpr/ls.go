package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rprtunnel/rpr/admin"
	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

func newLsCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	var output string
	cmd := &cobra.Command{
		Use:   "ls [pkg.Service...]",
		Short: "List services, their methods and their live workers",
		Long: `ls finds every service under the prefix that has published a schema or has
worker heartbeats, and prints for each its methods (with their flags and
default timeout, from the schema its servers published) and its workers
with their lane, the shards they read (of a sharded service) and their
last heartbeat, the version of the schema it was built with and the
methods it serves (while two releases run side by side, SERVED BY says
which workers serve each method). A worker is live when it beat within
the last 5s; silent workers stay listed for a minute. A service whose
workers have all been gone for 24h is no longer listed; rpr forget
removes one at once.

Method flags: idempotent (idempotency_level IDEMPOTENT or NO_SIDE_EFFECTS:
safe to retry and re-run after a crash), async ((rpr.v1.method).async),
server-streaming, client-streaming, bidi-streaming, deprecated.

Naming services lists only those (exit status 1 for a name Redis does not
know). -o json prints the same as JSON.`,
		Example: `  rpr ls --redis redis://10.0.0.5:6379/0
  rpr ls examples.greeter.v1.Greeter
  rpr ls -o json | jq -r '.services[].name'`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeServices(&rf, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				if err := checkServiceName(name, "rpr ls examples.greeter.v1.Greeter"); err != nil {
					return err
				}
			}
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			names := args
			if len(names) == 0 {
				if names, err = a.Services(ctx); err != nil {
					return badInput(err)
				}
			}
			for _, name := range args {
				if err := requireService(ctx, a, rf.url, name); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if len(names) == 0 && output != "json" {
				fmt.Fprintf(out, "no services under prefix %q (servers publish themselves when they start; check --redis and --prefix)\n", rf.prefix)
				return nil
			}
			doc := lsDoc{Services: []lsService{}}
			for i, name := range names {
				svc := a.Service(name)
				h, err := svc.Health(ctx)
				if err != nil {
					return badInput(err)
				}
				sd, schemaErr := svc.Schema(ctx)
				if output == "json" {
					doc.Services = append(doc.Services, lsServiceJSON(h, sd, schemaErr))
					continue
				}
				if i > 0 {
					fmt.Fprintln(out)
				}
				printService(out, h, sd, schemaErr)
			}
			if output == "json" {
				return writeJSON(out, doc)
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

// printService prints one service of rpr ls: a header line, a table of
// methods (from sd; schemaErr says why there is none) and one of workers.
func printService(out io.Writer, h admin.Health, sd protoreflect.ServiceDescriptor, schemaErr error) {
	live := 0
	for _, w := range h.Workers {
		if w.Live {
			live++
		}
	}
	status := "NOT SERVING (no live worker)"
	if live > 0 {
		status = fmt.Sprintf("serving, %d live worker%s", live, plural(live))
	}
	fmt.Fprintf(out, "%s  %s\n", h.Service, status)

	tw := newTable(out)
	switch {
	case sd != nil:
		fmt.Fprintln(tw, "  METHOD\tFLAGS\tTIMEOUT\tSERVED BY\tREQUEST -> RESPONSE")
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			timeout := "-"
			if desc, err := tunnel.MethodDescFor(md); err == nil && desc.Timeout > 0 {
				timeout = desc.Timeout.String()
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s -> %s\n", md.Name(), methodFlags(md), timeout, servedBy(h, string(md.Name())), md.Input().FullName(), md.Output().FullName())
		}
	case errors.Is(schemaErr, admin.ErrNoSchema):
		fmt.Fprintln(tw, "  methods unknown: no schema published (servers built with an rpr that publishes schemas do so when they start)")
	default:
		fmt.Fprintf(tw, "  methods unknown: %v\n", schemaErr)
	}
	tw.Flush()

	if len(h.Workers) == 0 {
		fmt.Fprintln(out, "  no workers (none has beaten in the last minute)")
		return
	}
	tw = newTable(out)
	fmt.Fprintln(tw, "  WORKER\tSTATE\tHOST\tPID\tLANE\tSHARDS\tSCHEMA\tMETHODS\tLAST BEAT")
	for _, w := range h.Workers {
		state := "live"
		if !w.Live {
			state = "silent"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s ago\n", w.ID, state, w.Host, w.PID, orDash(w.Lane), shardList(w.Shards),
			orDash(w.Schema), workerMethods(w, sd), time.Since(w.LastBeat).Round(100*time.Millisecond))
	}
	tw.Flush()
}

// lsDoc is -o json of rpr ls.
type lsDoc struct {
	Services []lsService `json:"services"`
}

// lsService is one service of rpr ls -o json.
type lsService struct {
	Name        string       `json:"name"`
	Serving     bool         `json:"serving"`
	LiveWorkers int          `json:"live_workers"`
	Methods     []lsMethod   `json:"methods"`
	SchemaError string       `json:"schema_error,omitempty"`
	Workers     []workerJSON `json:"workers"`
}

// lsMethod is one method of rpr ls -o json.
type lsMethod struct {
	Name     string   `json:"name"`
	Flags    []string `json:"flags"`
	Timeout  string   `json:"timeout,omitempty"`
	ServedBy string   `json:"served_by"`
	Request  string   `json:"request"`
	Response string   `json:"response"`
}

func lsServiceJSON(h admin.Health, sd protoreflect.ServiceDescriptor, schemaErr error) lsService {
	s := lsService{Name: h.Service, Serving: h.Serving(), Methods: []lsMethod{}, Workers: workersJSON(h.Workers)}
	for _, w := range h.Workers {
		if w.Live {
			s.LiveWorkers++
		}
	}
	if sd == nil {
		if schemaErr != nil {
			s.SchemaError = schemaErr.Error()
		}
		return s
	}
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		m := lsMethod{
			Name: string(md.Name()), Flags: []string{}, ServedBy: servedBy(h, string(md.Name())),
			Request: string(md.Input().FullName()), Response: string(md.Output().FullName()),
		}
		if f := methodFlags(md); f != "-" {
			m.Flags = strings.Split(f, ",")
		}
		if desc, err := tunnel.MethodDescFor(md); err == nil && desc.Timeout > 0 {
			m.Timeout = desc.Timeout.String()
		}
		s.Methods = append(s.Methods, m)
	}
	return s
}

// servedBy says which live workers serve method: "all" of them, some by
// id, or "none".
func servedBy(h admin.Health, method string) string {
	var live, serving []string
	for _, w := range h.Workers {
		if !w.Live {
			continue
		}
		live = append(live, w.ID)
		if w.Methods == nil || slices.Contains(w.Methods, method) {
			serving = append(serving, w.ID)
		}
	}
	switch {
	case len(live) == 0:
		return "-"
	case len(serving) == len(live):
		return "all"
	case len(serving) == 0:
		return "none"
	}
	return strings.Join(serving, ",")
}

// workerMethods lists the methods w serves: "all" when it serves every
// method of the schema shown (or does not say), else their names.
func workerMethods(w admin.WorkerStatus, sd protoreflect.ServiceDescriptor) string {
	if w.Methods == nil {
		return "all"
	}
	if sd != nil && len(w.Methods) == sd.Methods().Len() {
		return "all"
	}
	return strings.Join(w.Methods, ",")
}

// shardList prints the shards a worker reads compactly ("0-3,6"); "-" for
// none listed: the service is not sharded.
func shardList(shards []int) string {
	if len(shards) == 0 {
		return "-"
	}
	sorted := slices.Sorted(slices.Values(shards))
	var parts []string
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		part := strconv.Itoa(sorted[i])
		if j > i {
			part += "-" + strconv.Itoa(sorted[j])
		}
		parts = append(parts, part)
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// methodFlags lists what a method's options say about calling it.
func methodFlags(md protoreflect.MethodDescriptor) string {
	var flags []string
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_IDEMPOTENT, descriptorpb.MethodOptions_NO_SIDE_EFFECTS:
		flags = append(flags, "idempotent")
	}
	if rpr, _ := proto.GetExtension(opts, rprv1.E_Method).(*rprv1.MethodOptions); rpr.GetAsync() {
		flags = append(flags, "async")
	}
	if opts.GetDeprecated() {
		flags = append(flags, "deprecated")
	}
	switch {
	case md.IsStreamingClient() && md.IsStreamingServer():
		flags = append(flags, "bidi-streaming")
	case md.IsStreamingClient():
		flags = append(flags, "client-streaming")
	case md.IsStreamingServer():
		flags = append(flags, "server-streaming")
	}
	if len(flags) == 0 {
		return "-"
	}
	return strings.Join(flags, ",")
}
