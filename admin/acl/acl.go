package acl

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/rprtunnel/rpr/internal/store"
)

// Role is what a Redis user built here is for.
type Role string

// The roles ForServer, ForCaller and ForOperator build users for.
const (
	Server   Role = "server"
	Caller   Role = "caller"
	Operator Role = "operator"
)

// DefaultPassword is the placeholder the users' password rule carries
// when Options.Password is "": replace it before running the command.
const DefaultPassword = "CHANGE-ME"

// Options are what a user's rules depend on besides the role and the
// services.
type Options struct {
	// Prefix starts the deployment's keys and channels, as in
	// tunnel.ClientOptions.Prefix; "" is store.DefaultPrefix ("rpr:v1:").
	// It may not hold glob wildcards, quotes, braces or spaces.
	Prefix string
	// User names the Redis user. "" is "rpr-<role>-<service>" for one
	// service and "rpr-<role>" for an operator; with several services it
	// must be given.
	User string
	// Password is the password rule's text (">" + Password); ""
	// is DefaultPassword.
	Password string
	// ClientID, for a caller, is the prefix its clients' ClientOptions.ID
	// start with: its response streams are then resp:<ClientID>* and no
	// other caller's. "" allows every response stream of the services
	// (any client id).
	ClientID string
	// Upstreams adds what rpr ingress (a caller) and rpr egress (a
	// server) do with the upstream tables of the services named (the
	// tunnel's forwarding services): read each table and its version, in
	// MULTI/EXEC, and report the version applied.
	Upstreams bool
}

// User is one Redis ACL user: its name and the ACL SETUSER rules that
// make it, in order, starting with "reset".
type User struct {
	Name     string   // the Redis user's name
	Role     Role     // what the user is for
	Prefix   string   // the key prefix the rules cover
	Services []string // the services the rules cover (none for an operator)
	Rules    []string // the ACL SETUSER rules, selectors in parentheses
}

// Args returns the ACL SETUSER command as arguments for a Redis client's
// Do.
func (u User) Args() []any {
	args := []any{"ACL", "SETUSER", u.Name}
	for _, r := range u.Rules {
		args = append(args, r)
	}
	return args
}

// Command returns the ACL SETUSER command as one line for redis-cli, with
// each selector in double quotes.
func (u User) Command() string {
	parts := []string{"ACL", "SETUSER", u.Name}
	for _, r := range u.Rules {
		if strings.ContainsRune(r, ' ') {
			r = `"` + r + `"`
		}
		parts = append(parts, r)
	}
	return strings.Join(parts, " ")
}

// connection is what every role may run besides its keys' commands: the
// connection commands go-redis sends (HELLO, AUTH, SELECT, CLIENT
// SETNAME, READONLY...; @dangerous ones such as CLIENT KILL excluded),
// Redis's clock, loading rpr's scripts, CLUSTER SLOTS (how go-redis finds
// a Cluster's nodes) and CLUSTER INFO (how tunnel.Open tells a Cluster
// node from a standalone Redis without INFO, which is @dangerous).
var connection = []string{"+@connection", "-@dangerous", "+time", "+script|load", "+cluster|slots", "+cluster|info"}

// serviceName is a proto full name: dot-separated identifiers.
var serviceName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// checkPlain refuses a value that would change the meaning of an ACL
// rule or of the printed command: glob wildcards, braces, quotes, spaces.
func checkPlain(what, v, example string) error {
	if i := strings.IndexAny(v, "*?[]\\{}\"' \t\r\n()"); i >= 0 {
		return fmt.Errorf("%s %q holds %q, which an ACL pattern or the printed command would read as syntax: use letters, digits and :-_. only, e.g. %s", what, v, v[i], example)
	}
	return nil
}

func checkServices(services []string) error {
	if len(services) == 0 {
		return fmt.Errorf("name at least one service, e.g. acme.orders.v1.Orders")
	}
	for _, s := range services {
		if !serviceName.MatchString(s) {
			return fmt.Errorf("service %q: want a full proto service name, e.g. acme.orders.v1.Orders (a method goes nowhere here: ACL rules cannot tell methods apart)", s)
		}
	}
	return nil
}

// begin checks opts and returns the keyspace, the user's name and its
// rules up to its permissions: reset, on, password, connection commands.
func begin(role Role, services []string, opts Options) (store.Keyspace, string, []string, error) {
	keys := store.NewKeyspace(opts.Prefix)
	if err := checkPlain("prefix", keys.Prefix(), store.DefaultPrefix); err != nil {
		return keys, "", nil, err
	}
	name := opts.User
	switch {
	case name != "":
	case role == Operator:
		name = "rpr-operator"
	case len(services) == 1:
		name = "rpr-" + string(role) + "-" + services[0]
	default:
		return keys, "", nil, fmt.Errorf("%d services share one %s user: give it a name with --user (Options.User in Go), e.g. --user rpr-%s-shop", len(services), role, role)
	}
	if err := checkPlain("user name", name, "rpr-caller-shop"); err != nil {
		return keys, "", nil, err
	}
	password := opts.Password
	if password == "" {
		password = DefaultPassword
	}
	if err := checkPlain("password", password, DefaultPassword); err != nil {
		return keys, "", nil, err
	}
	if err := checkPlain("client id prefix", opts.ClientID, "shop-"); err != nil {
		return keys, "", nil, err
	}
	rules := append([]string{"reset", "resetchannels", "on", ">" + password}, connection...)
	return keys, name, rules, nil
}

// selector returns one selector: the key patterns, each with its
// permission ("~", "%R~", "%W~"), and the commands it allows.
func selector(perm string, patterns []string, commands ...string) string {
	parts := make([]string, 0, len(patterns)+len(commands))
	for _, p := range patterns {
		parts = append(parts, perm+p)
	}
	for _, c := range commands {
		parts = append(parts, "+"+c)
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// channels returns the channel rules of patterns.
func channels(patterns []string) []string {
	out := make([]string, len(patterns))
	for i, p := range patterns {
		out[i] = "&" + p
	}
	return out
}

// shards returns, for each service, shard 0's keys and the pattern shard
// of every other ({S#*}).
func shards(keys store.Keyspace, services []string) []store.Shard {
	var out []store.Shard
	for _, s := range services {
		out = append(out, keys.Shard(s, 0), keys.OtherShards(s))
	}
	return out
}

// upstreamRules are the rules of Options.Upstreams for services.
func upstreamRules(keys store.Keyspace, services []string) []string {
	tables := perService(services, func(s string) []string {
		return []string{keys.Upstreams(s), keys.UpstreamsVersion(s)}
	})
	applied := perService(services, func(s string) []string { return []string{keys.UpstreamsApplied(s)} })
	return []string{"+multi", "+exec", "+discard",
		selector("%R~", tables, "hgetall", "get"),
		selector("~", applied, "hset", "pexpire", "hdel", "hgetall")}
}

// perShard returns the patterns f gives for every shard of every service.
func perShard(keys store.Keyspace, services []string, f func(store.Shard) []string) []string {
	var out []string
	for _, sk := range shards(keys, services) {
		out = append(out, f(sk)...)
	}
	return out
}

// perService returns the patterns f gives for every service.
func perService(services []string, f func(string) []string) []string {
	var out []string
	for _, s := range services {
		out = append(out, f(s)...)
	}
	return out
}

// requests are the patterns of a shard's request streams, every lane.
func requests(sk store.Shard) []string {
	return []string{sk.Requests(store.DefaultLane), sk.Requests("*")}
}

// retries are the patterns of a shard's retry sets, every lane.
func retries(sk store.Shard) []string {
	return []string{sk.Retries(store.DefaultLane), sk.Retries("*")}
}

// ForOperator returns the user of an operator of the whole deployment
// under opts.Prefix: every command but @dangerous ones (and INFO, which
// rpr bench and Cluster detection read) on every key and channel under
// the prefix.
func ForOperator(opts Options) (User, error) {
	keys, name, rules, err := begin(Operator, nil, opts)
	if err != nil {
		return User{}, fmt.Errorf("rpr acl operator: %w", err)
	}
	all := keys.Prefix() + "*"
	rules = append(rules, "~"+all, "&"+all, "+@all", "-@dangerous", "+info")
	return User{Name: name, Role: Operator, Prefix: keys.Prefix(), Rules: rules}, nil
}
