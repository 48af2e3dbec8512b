package tunnel

// Parsing the URLs Open takes. go-redis parses each form itself
// (redis.ParseURL, ParseClusterURL, ParseFailoverURL); what is here turns
// rpr's forms (host lists, the Sentinel path) into those.

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisURLForms lists what Open accepts, for its errors.
const redisURLForms = "redis://[user:password@]host:port[/db] (one server, or any node of a Cluster), " +
	"redis://host1:port1,host2:port2,... (Cluster seeds), " +
	"redis+sentinel://[user:password@]host1:port1,host2:port2,.../master[/db] (Sentinel); " +
	"rediss:// and rediss+sentinel:// for TLS (?tls_ca=, ?tls_cert= with ?tls_key=, ?tls_server_name=)"

func urlError(rawURL string, err error) error {
	return fmt.Errorf("rpr: redis URL %q: %w; accepted forms: %s", RedactURL(rawURL), err, redisURLForms)
}

// redisTarget is a parsed Open URL: exactly one of single, cluster and
// failover is set.
type redisTarget struct {
	single *redis.Options
	// parts is, for a single TCP address, the URL cut up, for
	// parseClusterParts if the server turns out to be a Cluster node.
	parts    *urlParts
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// urlParts is a Redis URL cut by hand: a comma-separated host list is not
// a valid URL host (net/url refuses "[::1]:1,[::1]:2", for one).
type urlParts struct {
	scheme string // lower case
	user   string // "user:password@" as written, or ""
	hosts  []string
	path   string     // "" or starting with "/"
	query  url.Values // without the TLS parameters, which are in tls
	tls    tlsParams
}

// cutURL splits raw into its scheme, its authority (from "://" to the
// first '/', '?' or '#': [userinfo@]host list) and the rest.
func cutURL(raw string) (scheme, authority, tail string, ok bool) {
	scheme, rest, ok := strings.Cut(raw, "://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	return scheme, rest[:end], rest[end:], ok
}

func splitRedisURL(raw string) (urlParts, error) {
	scheme, authority, tail, ok := cutURL(raw)
	if !ok || scheme == "" {
		return urlParts{}, errors.New("no scheme")
	}
	p := urlParts{scheme: strings.ToLower(scheme)}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		p.user, authority = authority[:at+1], authority[at+1:]
	}
	tail, _, _ = strings.Cut(tail, "#")
	var rawQuery string
	p.path, rawQuery, _ = strings.Cut(tail, "?")
	var err error
	if p.query, err = url.ParseQuery(rawQuery); err != nil {
		return urlParts{}, fmt.Errorf("query: %w", err)
	}
	if p.scheme == "unix" {
		return p, nil
	}
	p.hosts = strings.Split(authority, ",")
	for _, h := range p.hosts {
		if strings.TrimSpace(h) == "" {
			return urlParts{}, fmt.Errorf("empty address in the host list %q", authority)
		}
	}
	return p, nil
}

// buildURL reassembles a URL for go-redis's parsers.
func buildURL(scheme, user, host, path string, query url.Values) string {
	s := scheme + "://" + user + host + path
	if q := query.Encode(); q != "" {
		s += "?" + q
	}
	return s
}

func parseRedisURL(raw string) (redisTarget, error) {
	p, err := splitRedisURL(raw)
	if err != nil {
		return redisTarget{}, err
	}
	if p.tls, err = takeTLSParams(p.scheme, p.query); err != nil {
		return redisTarget{}, err
	}
	switch p.scheme {
	case "unix":
		o, err := redis.ParseURL(raw)
		return redisTarget{single: o}, err
	case "redis", "rediss":
		if len(p.hosts) > 1 || p.query.Has("addr") {
			o, err := parseClusterParts(p)
			return redisTarget{cluster: o}, err
		}
		if p.tls.set() { // go-redis would refuse them
			raw = buildURL(p.scheme, p.user, p.hosts[0], p.path, p.query)
		}
		o, err := redis.ParseURL(raw)
		if err != nil {
			return redisTarget{}, err
		}
		if o.Dialer, err = withTLS(o.TLSConfig, p.tls); err != nil {
			return redisTarget{}, err
		}
		return redisTarget{single: o, parts: &p}, nil
	case "redis+sentinel", "rediss+sentinel":
		o, err := parseSentinelParts(p)
		return redisTarget{failover: o}, err
	}
	return redisTarget{}, fmt.Errorf("unknown scheme %q", p.scheme)
}

// parseClusterParts turns the seed list into go-redis's form
// (redis://h1:p1?addr=h2:p2&addr=h3:p3) and parses that.
func parseClusterParts(p urlParts) (*redis.ClusterOptions, error) {
	q := cloneValues(p.query)
	db := strings.Trim(p.path, "/")
	if q.Has("db") {
		db = q.Get("db")
		q.Del("db")
	}
	if db != "" && db != "0" {
		return nil, clusterDBError(db)
	}
	addrs := q["addr"]
	q.Del("addr")
	for _, h := range p.hosts[1:] {
		q.Add("addr", h)
	}
	for _, a := range addrs {
		q.Add("addr", a)
	}
	o, err := redis.ParseClusterURL(buildURL(p.scheme, p.user, p.hosts[0], "", q))
	if err != nil {
		return nil, err
	}
	if o.Dialer, err = withTLS(o.TLSConfig, p.tls); err != nil {
		return nil, err
	}
	return o, nil
}

func clusterDBError(db string) error {
	return fmt.Errorf("database %s with a Redis Cluster, which has only database 0: drop the /%s (or ?db=%s) from the URL", db, db, db)
}

// parseSentinelParts turns redis+sentinel://[user:pw@]s1,s2/master[/db] into
// go-redis's form (redis://s1/db?master_name=master&addr=s2) and parses
// that. go-redis would use the URL's user and password for the sentinels;
// here they are the data nodes' (what the application's data needs), and
// the sentinels' come from ?sentinel_username= and ?sentinel_password=.
func parseSentinelParts(p urlParts) (*redis.FailoverOptions, error) {
	q := cloneValues(p.query)
	var segs []string
	for s := range strings.SplitSeq(strings.Trim(p.path, "/"), "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	master, db := q.Get("master_name"), ""
	q.Del("master_name")
	switch len(segs) {
	case 0:
	case 1, 2:
		name, err := url.PathUnescape(segs[0])
		if err != nil {
			return nil, fmt.Errorf("master name %q: %w", segs[0], err)
		}
		if master != "" && master != name {
			return nil, fmt.Errorf("two master names, %q in the path and %q in ?master_name=", name, master)
		}
		master = name
		if len(segs) == 2 {
			db = segs[1]
		}
	default:
		return nil, fmt.Errorf("path %q: want /master or /master/db", p.path)
	}
	if master == "" {
		return nil, errors.New("no master name: Sentinel URLs name the monitored master after the sentinel addresses, e.g. redis+sentinel://host1:26379,host2:26379/mymaster")
	}
	if db != "" {
		if _, err := strconv.Atoi(db); err != nil {
			return nil, fmt.Errorf("database %q is not a number", db)
		}
	}
	sentinelUser, sentinelPassword := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q.Set("master_name", master)
	for _, h := range p.hosts[1:] {
		q.Add("addr", h)
	}
	path := ""
	if db != "" {
		path = "/" + db
	}
	o, err := redis.ParseFailoverURL(buildURL(strings.TrimSuffix(p.scheme, "+sentinel"), "", p.hosts[0], path, q))
	if err != nil {
		return nil, err
	}
	if p.user != "" {
		if o.Username != "" || o.Password != "" {
			return nil, errors.New("credentials given twice, before the @ and in ?username= or ?password=")
		}
		u, err := url.Parse("redis://" + p.user + "localhost")
		if err != nil {
			return nil, fmt.Errorf("user and password: %w", err)
		}
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPassword
	if o.Dialer, err = withTLS(o.TLSConfig, p.tls); err != nil {
		return nil, err
	}
	return o, nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// RedactURL hides the passwords of a Redis URL ("redis://user:****@host",
// also ?password= and ?sentinel_password=), so that the URL can appear in
// errors, logs and on screens. It works on every form Open accepts,
// including host lists that are not valid URLs to net/url.
func RedactURL(raw string) string {
	scheme, authority, tail, ok := cutURL(raw)
	if !ok {
		return raw
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if user, _, hasPassword := strings.Cut(authority[:at], ":"); hasPassword {
			authority = user + ":****" + authority[at:]
		}
	}
	if qi := strings.IndexByte(tail, '?'); qi >= 0 {
		query, frag, hasFrag := strings.Cut(tail[qi+1:], "#")
		params := strings.Split(query, "&")
		for i, kv := range params {
			k, _, _ := strings.Cut(kv, "=")
			if name, err := url.QueryUnescape(k); err == nil && (name == "password" || name == "sentinel_password") {
				params[i] = k + "=****"
			}
		}
		tail = tail[:qi+1] + strings.Join(params, "&")
		if hasFrag {
			tail += "#" + frag
		}
	}
	return scheme + "://" + authority + tail
}
