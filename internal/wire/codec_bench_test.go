package wire

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func BenchmarkEnvelope(b *testing.B) {
	payload := bytes.Repeat([]byte{0xab}, 128)
	req := validRequest()
	req.Payload = payload
	req.Header = Metadata{"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	resp := &Response{Version: Version, ID: req.ID, Payload: payload}
	reqRaw, respRaw := referenceEncode(b, req), referenceEncode(b, resp)

	b.Run("request/encode/reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request/encode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalEnvelope(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request/decode/reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			env := new(Request)
			if err := referenceDecodeStrict(reqRaw, env, func() int { return env.Version }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request/decode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeRequest(reqRaw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request/decode/in-place", func(b *testing.B) { // a server's path: a reply string, decoded into its request
		raw := string(reqRaw)
		b.ReportAllocs()
		for b.Loop() {
			var env Request
			if err := DecodeRequestStringInto(raw, &env); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("response/encode/reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("response/encode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalEnvelope(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("response/decode/reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			env := new(Response)
			if err := referenceDecodeStrict(respRaw, env, func() int { return env.Version }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("response/decode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeResponse(respRaw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
