// Package compilecheck runs generated code. TestGeneratedCodeCompiles copies
// its files into the module it generates (they do not build in this
// repository).
package compilecheck

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	basicv1 "example.com/rprtest/basic/v1"
	namesv1 "example.com/rprtest/names/v1"
	"github.com/rprtunnel/rpr/tunnel"
	"google.golang.org/protobuf/proto"
)

// registrar records what Register functions register.
type registrar struct {
	desc *tunnel.ServiceDesc
	impl any
}

func (r *registrar) RegisterService(desc *tunnel.ServiceDesc, impl any) {
	r.desc, r.impl = desc, impl
}

type ordersByValue struct {
	basicv1.UnimplementedOrdersServer
}

func (ordersByValue) GetOrder(_ context.Context, req *basicv1.GetOrderRequest) (*basicv1.Order, error) {
	return &basicv1.Order{Id: req.GetId()}, nil
}

// errNoWarehouse is what ordersByValue.ShipOrder returns for a request
// without a warehouse.
var errNoWarehouse = tunnel.Errorf(tunnel.FailedPrecondition, "no warehouse")

// shipped records the orders ordersByValue.ShipOrder was called with.
var shipped []string

func (ordersByValue) ShipOrder(_ context.Context, req *basicv1.ShipOrderRequest) error {
	if req.GetWarehouse() == "" {
		return errNoWarehouse
	}
	shipped = append(shipped, req.GetId())
	return nil
}

// The generated client and server methods of an async method have the
// async signatures: a receipt for the caller, only an error for the server.
var (
	_ func(basicv1.OrdersClient, context.Context, *basicv1.ShipOrderRequest, ...tunnel.CallOption) (tunnel.Receipt, error) = basicv1.OrdersClient.ShipOrder
	_ func(basicv1.OrdersServer, context.Context, *basicv1.ShipOrderRequest) error                                         = basicv1.OrdersServer.ShipOrder
)

type ordersByPointer struct {
	*basicv1.UnimplementedOrdersServer
}

func TestRegisterNilEmbeddedPanics(t *testing.T) {
	defer func() {
		got := fmt.Sprint(recover())
		want := "basicv1.RegisterOrdersServer: compilecheck.ordersByPointer embeds *UnimplementedOrdersServer and it is nil; embed UnimplementedOrdersServer by value, not by pointer"
		if got != want {
			t.Errorf("panic = %q\nwant    %q", got, want)
		}
	}()
	basicv1.RegisterOrdersServer(&registrar{}, ordersByPointer{})
}

func TestRegister(t *testing.T) {
	for _, srv := range []basicv1.OrdersServer{
		ordersByValue{},
		ordersByPointer{&basicv1.UnimplementedOrdersServer{}}, // not nil: works
	} {
		r := &registrar{}
		basicv1.RegisterOrdersServer(r, srv)
		if r.desc != &basicv1.Orders_ServiceDesc || r.impl != srv {
			t.Errorf("RegisterOrdersServer(%T) registered %v, %v", srv, r.desc, r.impl)
		}
	}
}

func TestServiceDesc(t *testing.T) {
	desc := basicv1.Orders_ServiceDesc
	if desc.Service != &basicv1.Orders_ServiceInfo || desc.File != "rprtest/basic/v1/basic.proto" {
		t.Errorf("Service, File = %p, %q; want &Orders_ServiceInfo, rprtest/basic/v1/basic.proto", desc.Service, desc.File)
	}
	if info := basicv1.Orders_ServiceInfo; info.Name != "rprtest.basic.v1.Orders" || info.BizCode != "ORD1" || info.MaxBacklog != 5000 || info.Shards != 3 {
		t.Errorf("Orders_ServiceInfo = %+v, want rprtest.basic.v1.Orders with BizCode ORD1, MaxBacklog 5000 and Shards 3", info)
	}
	if _, ok := desc.HandlerType.(*basicv1.OrdersServer); !ok {
		t.Errorf("HandlerType is %T", desc.HandlerType)
	}
	want := []struct {
		name       string
		fullMethod string
		timeout    time.Duration
		idempotent bool
		async      bool
	}{
		{"GetOrder", basicv1.Orders_GetOrder_FullMethodName, 1500 * time.Millisecond, true, false},
		{"CancelOrder", basicv1.Orders_CancelOrder_FullMethodName, 30 * time.Second, true, false},
		{"Ping", basicv1.Orders_Ping_FullMethodName, 30 * time.Second, false, false},
		{"Charge", basicv1.Orders_Charge_FullMethodName, 2 * time.Minute, false, false},
		{"OldLookup", basicv1.Orders_OldLookup_FullMethodName, time.Hour, false, false},
		{"Quick", basicv1.Orders_Quick_FullMethodName, 250 * time.Microsecond, false, false},
		{"ZeroTimeout", basicv1.Orders_ZeroTimeout_FullMethodName, 30 * time.Second, false, false},
		{"ShipOrder", basicv1.Orders_ShipOrder_FullMethodName, 30 * time.Second, false, true},
		{"OldNotify", basicv1.Orders_OldNotify_FullMethodName, 30 * time.Second, false, true},
	}
	if len(desc.Methods) != len(want) {
		t.Fatalf("%d methods, want %d", len(desc.Methods), len(want))
	}
	for i, w := range want {
		m := desc.Methods[i]
		if m.Name != w.name || m.FullMethod() != w.fullMethod || m.Timeout != w.timeout ||
			m.Idempotent != w.idempotent || m.Async != w.async || m.Service != &basicv1.Orders_ServiceInfo || m.Handler == nil {
			t.Errorf("method %d = %+v, want %+v pointing to Orders_ServiceInfo", i, m, w)
		}
	}
	if r := desc.Methods[7].Retry; r == nil || r.MaxAttempts != 10 || r.InitialBackoff != 2*time.Second {
		t.Errorf("ShipOrder retry = %+v, want 10 attempts from 2s", r)
	}

	legacy := basicv1.LegacyOrders_ServiceDesc.Methods[0]
	if info := legacy.Service; legacy.Timeout != 0 || info.BizCode != "" || legacy.Idempotent || legacy.Async || info.MaxBacklog != 0 || info.Shards != 0 {
		t.Errorf("LegacyOrders.GetOrder = %+v, want no defaults", legacy)
	}

	for got, want := range map[string]string{
		namesv1.Echo_Echo_FullMethodName:       "rprtest.names.v1.Echo/Echo",
		namesv1.EchoV2_DoThing_FullMethodName:  "rprtest.names.v1.echo_v2/do_thing",
		namesv1.Interface_Type_FullMethodName:  "rprtest.names.v1.Interface/Type",
		namesv1.Context_Context_FullMethodName: "rprtest.names.v1.Context/Context",
	} {
		if got != want {
			t.Errorf("full method name %q, want %q", got, want)
		}
	}
}

func TestHandlers(t *testing.T) {
	ctx := context.Background()
	getOrder := basicv1.Orders_ServiceDesc.Methods[0]
	request, err := proto.Marshal(&basicv1.GetOrderRequest{Id: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	decode := func(m proto.Message) error { return proto.Unmarshal(request, m) }

	// Without interceptor.
	reply, err := getOrder.Handler(ordersByValue{}, ctx, decode, nil)
	if err != nil || reply.(*basicv1.Order).GetId() != "o-1" {
		t.Errorf("GetOrder = %v, %v", reply, err)
	}

	// With an interceptor, which sees the method and the decoded request.
	var info *tunnel.UnaryServerInfo
	interceptor := func(ctx context.Context, req proto.Message, i *tunnel.UnaryServerInfo, handler tunnel.UnaryHandler) (proto.Message, error) {
		info = i
		return handler(ctx, req)
	}
	reply, err = getOrder.Handler(ordersByValue{}, ctx, decode, interceptor)
	if err != nil || reply.(*basicv1.Order).GetId() != "o-1" {
		t.Errorf("GetOrder through interceptor = %v, %v", reply, err)
	}
	if info == nil || info.FullMethod != "rprtest.basic.v1.Orders/GetOrder" || info.Server != (ordersByValue{}) {
		t.Errorf("interceptor got info %+v", info)
	}

	// A decoding error is returned as is, before the method runs.
	errDecode := errors.New("bad payload")
	if _, err := getOrder.Handler(ordersByValue{}, ctx, func(proto.Message) error { return errDecode }, nil); err != errDecode {
		t.Errorf("decode error: got %v", err)
	}

	// A method the server does not implement answers UNIMPLEMENTED.
	ping := basicv1.Orders_ServiceDesc.Methods[2]
	_, err = ping.Handler(ordersByValue{}, ctx, func(proto.Message) error { return nil }, nil)
	if tunnel.CodeOf(err) != tunnel.Unimplemented {
		t.Errorf("unimplemented Ping: got %v", err)
	}
}

func TestAsyncHandlers(t *testing.T) {
	ctx := context.Background()
	shipOrder := basicv1.Orders_ServiceDesc.Methods[7]
	decodeFrom := func(req *basicv1.ShipOrderRequest) func(proto.Message) error {
		raw, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return func(m proto.Message) error { return proto.Unmarshal(raw, m) }
	}
	shipped = nil

	// Without interceptor: a nil reply and the implementation's error.
	reply, err := shipOrder.Handler(ordersByValue{}, ctx, decodeFrom(&basicv1.ShipOrderRequest{Id: "o-1", Warehouse: "w"}), nil)
	if reply != nil || err != nil {
		t.Errorf("ShipOrder = %v, %v; want nil, nil", reply, err)
	}
	reply, err = shipOrder.Handler(ordersByValue{}, ctx, decodeFrom(&basicv1.ShipOrderRequest{Id: "o-2"}), nil)
	if reply != nil || err != errNoWarehouse {
		t.Errorf("ShipOrder without warehouse = %v, %v; want nil, %v", reply, err, errNoWarehouse)
	}

	// Through an interceptor, which sees the method, the decoded request,
	// and the handler's nil reply and error.
	var info *tunnel.UnaryServerInfo
	var seenReq, seenReply proto.Message
	var seenErr error
	interceptor := func(ctx context.Context, req proto.Message, i *tunnel.UnaryServerInfo, handler tunnel.UnaryHandler) (proto.Message, error) {
		info, seenReq = i, req
		seenReply, seenErr = handler(ctx, req)
		return seenReply, seenErr
	}
	reply, err = shipOrder.Handler(ordersByValue{}, ctx, decodeFrom(&basicv1.ShipOrderRequest{Id: "o-3", Warehouse: "w"}), interceptor)
	if reply != nil || err != nil || seenReply != nil || seenErr != nil {
		t.Errorf("ShipOrder through interceptor = %v, %v (handler gave %v, %v); want all nil", reply, err, seenReply, seenErr)
	}
	if info == nil || info.FullMethod != "rprtest.basic.v1.Orders/ShipOrder" || seenReq.(*basicv1.ShipOrderRequest).GetId() != "o-3" {
		t.Errorf("interceptor got info %+v, request %v", info, seenReq)
	}
	_, err = shipOrder.Handler(ordersByValue{}, ctx, decodeFrom(&basicv1.ShipOrderRequest{Id: "o-4"}), interceptor)
	if err != errNoWarehouse || seenErr != errNoWarehouse {
		t.Errorf("ShipOrder without warehouse through interceptor = %v (handler gave %v); want %v", err, seenErr, errNoWarehouse)
	}
	if len(shipped) != 2 || shipped[0] != "o-1" || shipped[1] != "o-3" {
		t.Errorf("shipped %q, want o-1 and o-3", shipped)
	}

	// An async method the server does not implement answers UNIMPLEMENTED.
	oldNotify := basicv1.Orders_ServiceDesc.Methods[8]
	reply, err = oldNotify.Handler(ordersByValue{}, ctx, func(proto.Message) error { return nil }, nil)
	if reply != nil || tunnel.CodeOf(err) != tunnel.Unimplemented {
		t.Errorf("unimplemented OldNotify = %v, %v; want nil, UNIMPLEMENTED", reply, err)
	}
}

// fakeConn is a tunnel.ClientConn that answers in process, as a test of
// code that uses a generated client would: it records each call, fills
// unary replies itself and runs streaming calls with impl (NewStream).
type fakeConn struct {
	calls []string

	t    *testing.T // for the cleanup of streams
	impl any        // the server implementation streams run with
}

func (f *fakeConn) Invoke(_ context.Context, method *tunnel.MethodDesc, req, reply proto.Message, _ ...tunnel.CallOption) error {
	f.calls = append(f.calls, method.FullMethod())
	if order, ok := reply.(*basicv1.Order); ok {
		order.Id = req.(*basicv1.GetOrderRequest).GetId()
	}
	return nil
}

func (f *fakeConn) Enqueue(_ context.Context, method *tunnel.MethodDesc, _ proto.Message, _ ...tunnel.CallOption) (tunnel.Receipt, error) {
	f.calls = append(f.calls, method.FullMethod())
	return tunnel.Receipt{RequestID: "fake"}, nil
}

func TestClientOverFakeConn(t *testing.T) {
	conn := &fakeConn{}
	orders := basicv1.NewOrdersClient(conn)
	order, err := orders.GetOrder(context.Background(), &basicv1.GetOrderRequest{Id: "o-1"})
	if err != nil || order.GetId() != "o-1" {
		t.Fatalf("GetOrder = %v, %v; want order o-1", order, err)
	}
	receipt, err := orders.ShipOrder(context.Background(), &basicv1.ShipOrderRequest{Id: "o-1"})
	if err != nil || receipt.RequestID != "fake" {
		t.Fatalf("ShipOrder = %+v, %v; want the fake receipt", receipt, err)
	}
	want := []string{basicv1.Orders_GetOrder_FullMethodName, basicv1.Orders_ShipOrder_FullMethodName}
	if fmt.Sprint(conn.calls) != fmt.Sprint(want) {
		t.Errorf("calls = %v, want %v", conn.calls, want)
	}
}
