package store

import "fmt"

// A master's term is the span in which one Redis process holds a
// shard's data as its master, named by the process (run_id) and its
// replication history (master_replid): a restart changes the first, a
// failover (a replica promoted) the second, and a master that was
// demoted and promoted again gets a new history too. Redis replicates
// asynchronously, so a new term may lack the last writes of the one
// before it: a worker's delivery of a request, say. A client that
// compares the term that settled a request with the one that held it
// when it was sent knows whether that can have happened.

// TermRefused is the term a probe or the arbiter returns when Redis
// refuses INFO to the user: such terms cannot be compared.
const TermRefused = "?"

// termLua defines node_term, which returns the term of the master that
// runs the script, TermRefused when INFO is refused (an ACL without
// +info|server and +info|replication).
const termLua = `
local function node_term()
  local srv = redis.pcall('INFO', 'server')
  local repl = redis.pcall('INFO', 'replication')
  if type(srv) ~= 'string' or type(repl) ~= 'string' then return '` + TermRefused + `' end
  local run = string.match(srv, 'run_id:(%x+)')
  local hist = string.match(repl, 'master_replid:(%x+)')
  if not run or not hist then return '` + TermRefused + `' end
  return run .. '/' .. hist
end
`

// termScript returns the term of the master that holds KEYS[1] (any key
// of a shard: it routes the script in a Cluster, and is not read).
var termScript = newScript("term", termLua+`
return node_term()
`)

// TermProbe reads the term of the master that holds a shard.
type TermProbe struct {
	Call
}

// NewTermProbe reads the term of the master that holds key (any key of
// the shard, not read).
func NewTermProbe(key string) *TermProbe {
	return &TermProbe{Call: Call{script: termScript, keys: []string{key}}}
}

// Result returns the term, TermRefused when Redis refuses INFO to this
// user.
func (p *TermProbe) Result() (string, error) {
	reply, err := p.reply()
	if err != nil {
		return "", err
	}
	term, ok := reply.(string)
	if !ok {
		return "", fmt.Errorf("script term: malformed reply %v", reply)
	}
	return term, nil
}
