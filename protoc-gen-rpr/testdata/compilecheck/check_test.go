// Package compilecheck runs generated code. TestGeneratedCodeCompiles copies
// it into the module it generates (it does not build in this repository).
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
	if desc.ServiceName != "rprtest.basic.v1.Orders" || desc.Metadata != "rprtest/basic/v1/basic.proto" {
		t.Errorf("ServiceName, Metadata = %q, %q", desc.ServiceName, desc.Metadata)
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
			m.Idempotent != w.idempotent || m.Async != w.async || m.BizCode != "ORD1" || m.MaxBacklog != 5000 || m.Shards != 3 || m.Handler == nil {
			t.Errorf("method %d = %+v, want %+v with BizCode ORD1, MaxBacklog 5000 and Shards 3", i, m, w)
		}
	}
	if r := desc.Methods[7].Retry; r == nil || r.MaxAttempts != 10 || r.InitialBackoff != 2*time.Second {
		t.Errorf("ShipOrder retry = %+v, want 10 attempts from 2s", r)
	}

	legacy := basicv1.LegacyOrders_ServiceDesc.Methods[0]
	if legacy.Timeout != 0 || legacy.BizCode != "" || legacy.Idempotent || legacy.Async || legacy.MaxBacklog != 0 || legacy.Shards != 0 {
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
