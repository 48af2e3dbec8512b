package tunnel

// TLS for the URLs Open takes: the query parameters that name a CA file, a
// client certificate and key and the server name (go-redis's parsers know
// none of them, so they are taken out of the query before it sees it), and
// a dialer that says so when the server at a rediss:// address does not
// speak TLS.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The TLS query parameters of Open's URLs. skip_verify is go-redis's own.
const (
	paramTLSCA         = "tls_ca"
	paramTLSCert       = "tls_cert"
	paramTLSKey        = "tls_key"
	paramTLSServerName = "tls_server_name"
	paramSkipVerify    = "skip_verify"
)

// tlsParamNames lists, in order, the parameters takeTLSParams takes, and
// skip_verify, which go-redis takes on TLS schemes only.
var tlsParamNames = [...]string{paramTLSCA, paramTLSCert, paramTLSKey, paramTLSServerName, paramSkipVerify}

// tlsParams are the TLS query parameters of one URL.
type tlsParams struct {
	ca, cert, key, serverName string
}

func (p tlsParams) set() bool { return p != tlsParams{} }

// takeTLSParams removes rpr's TLS parameters from q and returns them. It
// refuses them, and skip_verify, on a scheme without TLS, and refuses a
// parameter given twice or empty, and a certificate without its key.
func takeTLSParams(scheme string, q url.Values) (tlsParams, error) {
	if !strings.HasPrefix(scheme, "rediss") {
		for _, name := range tlsParamNames {
			if q.Has(name) {
				return tlsParams{}, fmt.Errorf("?%s= is a TLS parameter, but %s:// does not use TLS: use %s:// (and the server's TLS port) or drop ?%s=",
					name, scheme, tlsScheme(scheme), name)
			}
		}
		return tlsParams{}, nil
	}
	var p tlsParams
	for _, f := range []struct {
		name string
		dst  *string
	}{{paramTLSCA, &p.ca}, {paramTLSCert, &p.cert}, {paramTLSKey, &p.key}, {paramTLSServerName, &p.serverName}} {
		name := f.name
		vs, ok := q[name]
		if !ok {
			continue
		}
		q.Del(name)
		switch {
		case len(vs) > 1:
			return tlsParams{}, fmt.Errorf("?%s= given %d times: give it once", name, len(vs))
		case vs[0] == "":
			return tlsParams{}, fmt.Errorf("?%s= is empty: %s", name, tlsParamWants(name))
		}
		*f.dst = vs[0]
	}
	switch {
	case p.cert != "" && p.key == "":
		return tlsParams{}, fmt.Errorf("?%s=%s without ?%s=: a client certificate needs its private key (PEM file)", paramTLSCert, p.cert, paramTLSKey)
	case p.key != "" && p.cert == "":
		return tlsParams{}, fmt.Errorf("?%s=%s without ?%s=: a private key needs its client certificate (PEM file)", paramTLSKey, p.key, paramTLSCert)
	}
	return p, nil
}

// tlsScheme is the TLS form of a scheme without TLS.
func tlsScheme(scheme string) string {
	if scheme == "unix" {
		return "rediss"
	}
	return "rediss" + strings.TrimPrefix(scheme, "redis")
}

func tlsParamWants(name string) string {
	switch name {
	case paramTLSCA:
		return "name a PEM file of the CA certificates the server's certificate must chain to"
	case paramTLSCert:
		return "name the PEM file of the client certificate"
	case paramTLSKey:
		return "name the PEM file of the client certificate's private key"
	}
	return "name the host name the server's certificate must carry"
}

// apply loads the files p names and sets them on cfg, the tls.Config
// go-redis made for the rediss scheme.
func (p tlsParams) apply(cfg *tls.Config) error {
	if p.ca != "" {
		pool, err := loadCAFile(p.ca)
		if err != nil {
			return err
		}
		cfg.RootCAs = pool
	}
	if p.cert != "" {
		cert, err := loadKeyPair(p.cert, p.key)
		if err != nil {
			return err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if p.serverName != "" {
		cfg.ServerName = p.serverName
	}
	return nil
}

// loadCAFile reads a PEM file of one or more CA certificates.
func loadCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("?%s=%s: %w", paramTLSCA, path, err)
	}
	pool := x509.NewCertPool()
	rest, n := data, 0
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("?%s=%s: certificate %d: %w", paramTLSCA, path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("?%s=%s: no PEM certificate (-----BEGIN CERTIFICATE-----) in the file: name the CA's certificate in PEM form", paramTLSCA, path)
	}
	return pool, nil
}

// loadKeyPair reads a client certificate and its key, naming the parameter
// and the file of whichever is wrong.
func loadKeyPair(certPath, keyPath string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("?%s=%s: %w", paramTLSCert, certPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("?%s=%s: %w", paramTLSKey, keyPath, err)
	}
	if !hasPEMBlock(certPEM, func(t string) bool { return t == "CERTIFICATE" }) {
		return tls.Certificate{}, fmt.Errorf("?%s=%s: no PEM certificate (-----BEGIN CERTIFICATE-----) in the file", paramTLSCert, certPath)
	}
	if !hasPEMBlock(keyPEM, func(t string) bool { return t == "PRIVATE KEY" || strings.HasSuffix(t, " PRIVATE KEY") }) {
		return tls.Certificate{}, fmt.Errorf("?%s=%s: no PEM private key (-----BEGIN PRIVATE KEY-----) in the file", paramTLSKey, keyPath)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("?%s=%s with ?%s=%s: %w", paramTLSCert, certPath, paramTLSKey, keyPath, err)
	}
	return cert, nil
}

func hasPEMBlock(data []byte, want func(blockType string) bool) bool {
	for {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return false
		}
		if want(block.Type) {
			return true
		}
	}
}

// dialKeepAlive is the TCP keep-alive of rpr's TLS dials, as go-redis's
// own dialer has it: probe after 30 s idle, give up after three probes 5 s
// apart.
var dialKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}

// plaintextProbeDelay is how long a TLS handshake may wait for the
// server's first bytes before tlsDialer asks, on a second connection,
// whether the port speaks plaintext Redis. A Redis without TLS reads a
// ClientHello as the start of an inline command and waits for its end,
// silently; a TLS server answers within a round trip.
const plaintextProbeDelay = 500 * time.Millisecond

// plaintextProbeTimeout bounds one probe.
const plaintextProbeTimeout = 2 * time.Second

// tlsDialer dials TLS with cfg for go-redis (Options.Dialer). Unlike
// go-redis's own dialer it honours ctx during the handshake, and it tells
// a server that does not speak TLS from one that is slow: when the
// handshake gets no answer for plaintextProbeDelay, or the server closes
// it, it sends PING on a plain connection to the same address, and a Redis
// reply ends the dial with an error saying to use redis:// or the TLS
// port. An address found plaintext is probed at once on its next dial, so
// go-redis's dial retries fail fast too, until a handshake there succeeds.
type tlsDialer struct {
	cfg *tls.Config

	mu        sync.Mutex
	plaintext map[string]bool // addresses whose last probe got a plaintext reply
}

func newTLSDialer(cfg *tls.Config) *tlsDialer {
	return &tlsDialer{cfg: cfg, plaintext: map[string]bool{}}
}

// notTLSError is what a dial to a plaintext port fails with.
type notTLSError struct {
	addr, reply string
}

func (e *notTLSError) Error() string {
	return fmt.Sprintf("the server at %s does not speak TLS: it answers in plaintext Redis (%q); use redis:// for this port, or rediss:// with the server's TLS port (tls-port)", e.addr, e.reply)
}

func (d *tlsDialer) suspect(addr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.plaintext[addr]
}

func (d *tlsDialer) mark(addr string, plaintext bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if plaintext {
		d.plaintext[addr] = true
	} else {
		delete(d.plaintext, addr)
	}
}

// Dial is the go-redis Dialer.
func (d *tlsDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	raw, err := (&net.Dialer{KeepAliveConfig: dialKeepAlive}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := d.cfg
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		} else {
			cfg.ServerName = addr
		}
	}
	conn := tls.Client(raw, cfg)
	if err := d.handshake(ctx, conn, network, addr); err != nil {
		_ = raw.Close()
		return nil, err
	}
	d.mark(addr, false)
	return conn, nil
}

// handshake runs conn's handshake and, when it stays unanswered, a
// plaintext probe beside it; a plaintext reply aborts the handshake.
func (d *tlsDialer) handshake(ctx context.Context, conn *tls.Conn, network, addr string) error {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	delay := plaintextProbeDelay
	if d.suspect(addr) {
		delay = 0
	} else if deadline, ok := ctx.Deadline(); ok {
		delay = min(delay, time.Until(deadline)/2)
	}
	probed := make(chan struct{})
	timer := time.AfterFunc(delay, func() {
		defer close(probed)
		if reply, ok := probePlaintext(hctx, network, addr); ok {
			cancel(&notTLSError{addr: addr, reply: reply})
		}
	})
	err := conn.HandshakeContext(hctx)
	if !timer.Stop() {
		cancel(nil) // end a probe still running
		<-probed
	} else if err != nil && closedEarly(err) {
		// Closed before the probe was due: ask now.
		if reply, ok := probePlaintext(ctx, network, addr); ok {
			cancel(&notTLSError{addr: addr, reply: reply})
		}
	}
	if err == nil {
		return nil
	}
	var notTLS *notTLSError
	if errors.As(context.Cause(hctx), &notTLS) {
		d.mark(addr, true)
		return notTLS
	}
	var rec tls.RecordHeaderError
	if errors.As(err, &rec) && isRESPType(rec.RecordHeader[0]) {
		d.mark(addr, true)
		return &notTLSError{addr: addr, reply: string(rec.RecordHeader[:])}
	}
	return fmt.Errorf("TLS handshake with %s: %w%s", addr, err, verifyHint(err))
}

// verifyHint says which parameter fixes a failed verification of the
// server's certificate.
func verifyHint(err error) string {
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	switch {
	case errors.As(err, &authority):
		return " (the server's certificate is not signed by a CA this process trusts: name the CA's PEM file with ?" + paramTLSCA + "=)"
	case errors.As(err, &host):
		return " (name the host the certificate was issued for with ?" + paramTLSServerName + "=)"
	}
	return ""
}

// refusedCertHint says what to do when the server refused the client's
// certificate, or the lack of one (conf is the connection's TLS
// configuration, nil without TLS). Under TLS 1.3 the server tells so
// after the client's side of the handshake is done: with an alert on
// the first read, or, when the client's first write reaches it after it
// hung up, only by resetting the connection.
func refusedCertHint(err error, conf *tls.Config) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	noClientCert := conf != nil && len(conf.Certificates) == 0 && conf.GetClientCertificate == nil
	switch {
	case strings.Contains(msg, "tls: certificate required"):
		return " (the server requires a client certificate: give ?" + paramTLSCert + "= and ?" + paramTLSKey + "=)"
	case noClientCert && closedEarly(err):
		return " (the server closed the connection after the TLS handshake: if it requires client certificates (tls-auth-clients), give ?" + paramTLSCert + "= and ?" + paramTLSKey + "=)"
	case strings.Contains(msg, "tls: unknown certificate authority"), strings.Contains(msg, "tls: bad certificate"):
		return " (the server does not accept the client certificate of ?" + paramTLSCert + "=: use one signed by a CA the server trusts, tls-ca-cert-file)"
	}
	return ""
}

// closedEarly reports whether a handshake failed because the server closed
// or reset the connection.
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// probePlaintext sends PING to addr without TLS and returns the first
// line of the answer if it is a Redis reply ("+PONG", "-NOAUTH ...").
// A TLS server takes the PING for a broken record and closes or alerts.
func probePlaintext(ctx context.Context, network, addr string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, plaintextProbeTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return "", false
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return "", false
	}
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	if err != nil || !isRESPType(line[0]) {
		return "", false
	}
	return strings.TrimRight(line, "\r\n"), true
}

// isRESPType reports whether b starts a RESP2 or RESP3 reply; no TLS
// record type (20 to 24) is one.
func isRESPType(b byte) bool {
	return strings.IndexByte("+-:$*_#,(!=%~>|", b) >= 0
}

// withTLS applies p to cfg, the tls.Config go-redis made for a rediss
// scheme (nil for the others), and returns the Dialer for the options:
// tlsDialer's, or nil (go-redis's own) without TLS.
func withTLS(cfg *tls.Config, p tlsParams) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	if cfg == nil {
		return nil, nil
	}
	if err := p.apply(cfg); err != nil {
		return nil, err
	}
	return newTLSDialer(cfg).Dial, nil
}
