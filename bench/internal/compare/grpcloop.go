package compare

import (
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// grpcLoopback is a gRPC-go server of one service on a loopback TCP port
// and a client connection to it: the baseline every comparison runs
// against.
type grpcLoopback struct {
	server *grpc.Server
	conn   *grpc.ClientConn
	served chan error
}

// startGRPCLoopback serves desc (with an empty implementation: its
// handlers need none) and connects to it.
func startGRPCLoopback(desc *grpc.ServiceDesc) (*grpcLoopback, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &grpcLoopback{server: grpc.NewServer(), served: make(chan error, 1)}
	g.server.RegisterService(desc, struct{}{})
	go func() { g.served <- g.server.Serve(l) }()
	g.conn, err = grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Close stops the client and the server.
func (g *grpcLoopback) Close() {
	if g.conn != nil {
		g.conn.Close()
	}
	g.server.Stop()
	<-g.served
}
