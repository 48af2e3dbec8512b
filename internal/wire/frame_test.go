package wire

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// sampleFrames has one frame of each type, and the extremes.
func sampleFrames() map[string]*Frame {
	return map[string]*Frame{
		"accept":        {Version: StreamVersion, ID: "id", Type: FrameAccept, Inbox: "rpr:v1:{s.S}:in:w1", Worker: "w1", Window: 64, WindowBytes: 1 << 20},
		"header":        {Version: StreamVersion, ID: "id", Type: FrameHeader, Header: Metadata{"k": {"v", "w"}}},
		"message":       {Version: StreamVersion, ID: "id", Type: FrameMessage, Seq: 7, Payload: []byte("payload")},
		"empty message": {Version: StreamVersion, ID: "id", Type: FrameMessage, Seq: 1},
		"close":         {Version: StreamVersion, ID: "id", Type: FrameClose, Seq: 12},
		"credit":        {Version: StreamVersion, ID: "id", Type: FrameCredit, Consumed: 32, ConsumedBytes: 40000},
		"blocked":       {Version: StreamVersion, ID: "id", Type: FrameBlocked, Size: 600000},
		"extremes": {Version: math.MinInt64, ID: big[:300], Type: math.MaxUint8, Seq: math.MaxInt64, Payload: []byte(big),
			Window: math.MaxInt32 + 1, WindowBytes: math.MinInt64, Consumed: -1, ConsumedBytes: math.MaxInt64, Size: math.MinInt64},
		"zero": {},
	}
}

func decodeFrameInPlace(b []byte, f *Frame) error {
	return decodeEnvelope(stringBytes(string(b)), shareAll, func(r *envelopeReader) error { return readFrameFields(r, f) })
}

// TestFrameCodecCompatibility checks the frame codec against msgpack's
// reflection codec both ways, as for envelopes.
func TestFrameCodecCompatibility(t *testing.T) {
	for name, in := range sampleFrames() {
		t.Run(name, func(t *testing.T) {
			checkCompatibility(t, in, EncodeFrame, decodeFrameInPlace)
		})
	}
}

func TestFrameValidation(t *testing.T) {
	for name, f := range sampleFrames() {
		b, err := EncodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeFrame(b)
		valid := name != "extremes" && name != "zero"
		if valid != (err == nil) {
			t.Errorf("%s: DecodeFrame err = %v, want valid %t", name, err, valid)
			continue
		}
		if valid {
			again, _ := EncodeFrame(got)
			if !bytes.Equal(again, b) {
				t.Errorf("%s: round trip changed the frame: %+v", name, got)
			}
		}
	}
	for name, c := range map[string]struct {
		f    Frame
		want string
	}{
		"message 0":        {Frame{Version: StreamVersion, ID: "id", Type: FrameMessage}, "messages count from 1"},
		"accept, no inbox": {Frame{Version: StreamVersion, ID: "id", Type: FrameAccept, Worker: "w", Window: 1, WindowBytes: 1}, "needs an inbox"},
		"v1 frame":         {Frame{Version: Version, ID: "id", Type: FrameHeader}, "frames are version 2"},
		"unknown type":     {Frame{Version: StreamVersion, ID: "id", Type: 9}, "unknown type 9"},
		"negative credit":  {Frame{Version: StreamVersion, ID: "id", Type: FrameCredit, Consumed: -1}, "credit of -1"},
		"blocked on 0":     {Frame{Version: StreamVersion, ID: "id", Type: FrameBlocked}, "blocked on a message of 0 bytes"},
		"no id":            {Frame{Version: StreamVersion, Type: FrameHeader}, "no request id"},
		"newer version":    {Frame{Version: StreamVersion + 1, ID: "id", Type: FrameHeader}, "version 3 is not supported"},
	} {
		b, _ := EncodeFrame(&c.f)
		if _, err := DecodeFrame(b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}

// TestDecodeFrames checks that one StreamField value carries frames back
// to back, in order, and that a malformed one keeps those before it.
func TestDecodeFrames(t *testing.T) {
	var value []byte
	for seq := int64(1); seq <= 3; seq++ {
		b, _ := EncodeFrame(&Frame{Version: StreamVersion, ID: "id", Type: FrameMessage, Seq: seq, Payload: []byte{byte(seq)}})
		value = append(value, b...)
	}
	frames, err := DecodeFramesString(string(value))
	if err != nil || len(frames) != 3 {
		t.Fatalf("DecodeFramesString = %d frames, %v; want 3", len(frames), err)
	}
	for i, f := range frames {
		if f.Seq != int64(i+1) || !bytes.Equal(f.Payload, []byte{byte(i + 1)}) {
			t.Errorf("frame %d = %+v", i, f)
		}
	}
	if _, err := DecodeFrame(value); err == nil || !strings.Contains(err.Error(), "3 frames where one was expected") {
		t.Errorf("DecodeFrame of three frames: err = %v", err)
	}
	bad, _ := EncodeFrame(&Frame{Version: StreamVersion, ID: "id", Type: FrameMessage})
	frames, err = DecodeFramesString(string(append(value[:len(value):len(value)], bad...)))
	if len(frames) != 3 || err == nil || !strings.Contains(err.Error(), "messages count from 1") {
		t.Errorf("a bad fourth frame: %d frames, err %v; want the 3 before it and the error", len(frames), err)
	}
	if _, err := DecodeFramesString(""); err == nil {
		t.Error("an empty value decoded")
	}
}
