package tunnel

import (
	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/internal/bufpool"
)

// marshalPooled marshals m into a buffer from pool, sized for it: the
// message is *buf, its caller's until it gives buf back (pool.Put). A
// payload is copied into its envelope anyway, so the marshalled form
// needs no memory of its own beyond that.
func marshalPooled(pool *bufpool.Pool, m proto.Message) (*[]byte, error) {
	buf := pool.Get(proto.Size(m))
	// The size just computed is cached in m: the marshal uses it rather
	// than walking m twice, as gRPC-go's codec does.
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = out
	return buf, nil
}

// marshalRequest encodes a call's request, within the client's size limit.
func (c *Client) marshalRequest(s *callStart, req proto.Message) ([]byte, error) {
	payload, err := proto.Marshal(req)
	if err != nil {
		return nil, notExecutedf(Internal, "%s [%s]: marshal request %T: %v", s.full, s.rid, req, err)
	}
	return payload, c.checkRequest(s, payload)
}

// marshalRequestPooled is marshalRequest into a buffer of the client's
// pool, for a request whose payload is only read while the call encodes
// its envelopes (a unary call, an enqueue): the payload is *buf, and the
// caller gives buf back (c.buffers.Put) once the call has returned.
func (c *Client) marshalRequestPooled(s *callStart, req proto.Message) (*[]byte, error) {
	buf, err := marshalPooled(&c.buffers, req)
	if err != nil {
		return nil, notExecutedf(Internal, "%s [%s]: marshal request %T: %v", s.full, s.rid, req, err)
	}
	if err := c.checkRequest(s, *buf); err != nil {
		c.buffers.Put(buf)
		return nil, err
	}
	return buf, nil
}

// checkRequest refuses a request over the client's size limits.
func (c *Client) checkRequest(s *callStart, payload []byte) error {
	if len(payload) > c.opts.MaxRequestBytes {
		return notExecutedf(ResourceExhausted, "%s [%s]: request is %d bytes, over the %d-byte limit (ClientOptions.MaxRequestBytes; the server has its own limit too)", s.full, s.rid, len(payload), c.opts.MaxRequestBytes)
	}
	return checkMetadataSize(s.full, s.rid, s.cfg.header)
}
