package tunnel

import (
	"context"
)

// NewStream starts a streaming call of method. (Being implemented.)
func (c *Client) NewStream(ctx context.Context, method *MethodDesc, opts ...CallOption) (ClientStream, error) {
	return nil, Errorf(Unimplemented, "%s: streaming is being implemented", method.FullMethod())
}
