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
