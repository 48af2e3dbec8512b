package wire

import (
	"errors"
	"fmt"
)

// StreamField is the stream field that holds frames: one or more Frames
// of one stream, encoded back to back, in order (one entry carries what a
// sender had queued, so a busy stream costs one XADD per batch). Frames
// share the caller's response stream with Response envelopes (field
// Field) and a worker's inbox stream with nothing else.
const StreamField = "s"

// FrameType says what a Frame carries.
type FrameType uint8

// The frames of a streaming call. A stream is opened by a Request of kind
// KindStream and ended by the server's Response (its status, trailer).
// In between:
//
//	server -> caller (the caller's response stream, Request.ReplyTo):
//	  FrameAccept   once, first: the worker took the stream; the caller's
//	                messages go to Inbox from now on, within Window and
//	                WindowBytes
//	  FrameHeader   at most once, before the first message: the response
//	                header
//	  FrameMessage  the server's messages, Seq 1, 2, ...
//	  FrameCredit   how many of the caller's messages (and bytes) the
//	                handler has consumed, cumulative
//	  FrameBlocked  the server waits for credit to send a message of Size
//	                bytes
//	caller -> server (the worker's inbox, FrameAccept.Inbox):
//	  FrameMessage  the caller's messages, Seq continuing after those the
//	                open carried (Request.Messages)
//	  FrameClose    the caller sends no more; Seq is how many it sent
//	  FrameCredit   how many of the server's messages (and bytes) the
//	                caller has consumed, cumulative
//	  FrameBlocked  the caller waits for credit to send a message of Size
//	                bytes
//
// Flow control: a sender may have at most Window messages, and WindowBytes
// bytes of payload (one larger message when none is outstanding), sent and
// not yet consumed by the receiving application, as the receiver's last
// FrameCredit says. A receiver sends a credit whenever it has consumed half
// a window since its last one, and, after a FrameBlocked, as soon as what
// it has consumed lets the blocked message go (a message bigger than half
// the window, behind smaller ones, would otherwise wait for a credit that
// never comes). Frames of one stream in one direction are
// written in Seq order; a receiver drops a message whose Seq it has seen
// (a resend after a lost reply) and breaks the stream on a gap (a message
// lost, say in an unreplicated failover).
const (
	FrameAccept  FrameType = 1
	FrameHeader  FrameType = 2
	FrameMessage FrameType = 3
	FrameClose   FrameType = 4
	FrameCredit  FrameType = 5
	FrameBlocked FrameType = 6
)

// Frame is one frame of a streaming call (see FrameAccept). Like Request's,
// its struct tags are the wire format, written and read by EncodeFrame and
// DecodeFrame.
type Frame struct {
	Version int       `msgpack:"v"`
	ID      string    `msgpack:"id"` // the call's request id
	Type    FrameType `msgpack:"t"`
	// Seq numbers a FrameMessage (from 1 in each direction) and, in a
	// FrameClose, counts the messages sent.
	Seq     int64    `msgpack:"q,omitempty"`
	Payload []byte   `msgpack:"p,omitempty"`
	Header  Metadata `msgpack:"h,omitempty"`
	// Inbox and Worker (FrameAccept) say where the caller's frames go and
	// which worker runs the stream.
	Inbox  string `msgpack:"in,omitempty"`
	Worker string `msgpack:"wk,omitempty"`
	// Window and WindowBytes (FrameAccept) are the window the server
	// grants the caller's messages.
	Window      int   `msgpack:"w,omitempty"`
	WindowBytes int64 `msgpack:"wb,omitempty"`
	// Consumed and ConsumedBytes (FrameCredit) count the peer's messages,
	// and their bytes, the sender of the credit has consumed.
	Consumed      int64 `msgpack:"cn,omitempty"`
	ConsumedBytes int64 `msgpack:"cb,omitempty"`
	// Size (FrameBlocked) is the size of the message its sender waits to
	// send.
	Size int64 `msgpack:"sz,omitempty"`
}

// EncodeFrame encodes a frame as msgpack.Marshal would, without reflection.
func EncodeFrame(f *Frame) ([]byte, error) {
	w := newEnvelopeWriter(len(f.Payload) + metadataBytes(f.Header))
	defer w.release()
	// v, id and t are always written; the rest are omitempty.
	w.mapLen(3 + present(f.Seq != 0, len(f.Payload) > 0, len(f.Header) > 0, f.Inbox != "", f.Worker != "",
		f.Window != 0, f.WindowBytes != 0, f.Consumed != 0, f.ConsumedBytes != 0, f.Size != 0))
	w.int("v", f.Version)
	w.string("id", f.ID)
	w.uint8("t", uint8(f.Type))
	if f.Seq != 0 {
		w.int64("q", f.Seq)
	}
	if len(f.Payload) > 0 {
		w.bytes("p", f.Payload)
	}
	if len(f.Header) > 0 {
		w.metadata("h", f.Header)
	}
	if f.Inbox != "" {
		w.string("in", f.Inbox)
	}
	if f.Worker != "" {
		w.string("wk", f.Worker)
	}
	if f.Window != 0 {
		w.int("w", f.Window)
	}
	if f.WindowBytes != 0 {
		w.int64("wb", f.WindowBytes)
	}
	if f.Consumed != 0 {
		w.int64("cn", f.Consumed)
	}
	if f.ConsumedBytes != 0 {
		w.int64("cb", f.ConsumedBytes)
	}
	if f.Size != 0 {
		w.int64("sz", f.Size)
	}
	return w.result()
}

// DecodeFrame decodes and validates one frame alone.
func DecodeFrame(b []byte) (*Frame, error) {
	frames, err := decodeFrames(b, shareNothing)
	switch {
	case err != nil:
		return nil, err
	case len(frames) != 1:
		return nil, fmt.Errorf("malformed frame: %d frames where one was expected", len(frames))
	}
	return frames[0], nil
}

// DecodeFramesString decodes and validates the frames of one StreamField
// value as Redis hands it over (see DecodeRequestString). After a
// malformed frame it returns those before it and the error: the rest of
// the value cannot be told apart from it.
func DecodeFramesString(raw string) ([]*Frame, error) {
	return decodeFrames(stringBytes(raw), shareAll)
}

func decodeFrames(b []byte, share sharing) ([]*Frame, error) {
	if len(b) == 0 {
		return nil, errors.New("malformed frame: empty")
	}
	var frames []*Frame
	err := readEnvelope(b, share, func(r *envelopeReader) error {
		for r.src.Len() > 0 {
			start := len(b) - r.src.Len()
			f := new(Frame)
			if err := readFrameFields(r, f); err != nil {
				if got := peekVersion(b[start:]); got > StreamVersion {
					return VersionError{Got: got}
				}
				return fmt.Errorf("malformed frame: %w", err)
			}
			if f.Version > StreamVersion {
				return VersionError{Got: f.Version}
			}
			if err := f.check(); err != nil {
				return err
			}
			frames = append(frames, f)
		}
		return nil
	})
	return frames, err
}

// check validates a decoded frame.
func (f *Frame) check() error {
	if f.Version != StreamVersion {
		return fmt.Errorf("malformed frame: version %d (frames are version %d)", f.Version, StreamVersion)
	}
	if f.ID == "" {
		return errors.New("malformed frame: no request id")
	}
	switch f.Type {
	case FrameAccept:
		if f.Inbox == "" || f.Worker == "" || f.Window < 1 || f.WindowBytes < 1 {
			return errors.New("malformed frame: an accept needs an inbox, a worker and a positive window")
		}
	case FrameHeader:
	case FrameMessage:
		if f.Seq < 1 {
			return fmt.Errorf("malformed frame: message number %d (messages count from 1)", f.Seq)
		}
	case FrameClose:
		if f.Seq < 0 {
			return fmt.Errorf("malformed frame: a close after %d messages", f.Seq)
		}
	case FrameCredit:
		if f.Consumed < 0 || f.ConsumedBytes < 0 {
			return fmt.Errorf("malformed frame: credit of %d messages, %d bytes", f.Consumed, f.ConsumedBytes)
		}
	case FrameBlocked:
		if f.Size < 1 {
			return fmt.Errorf("malformed frame: blocked on a message of %d bytes", f.Size)
		}
	default:
		return fmt.Errorf("malformed frame: unknown type %d", f.Type)
	}
	return nil
}

// readFrameFields reads the frame at r's position into f, refusing
// unknown keys and values of the wrong type.
func readFrameFields(r *envelopeReader, f *Frame) error {
	return r.fields(func(key []byte) (err error) {
		switch string(key) {
		case "v":
			f.Version, err = decodeInt[int](r)
		case "id":
			f.ID, err = r.string()
		case "t":
			f.Type, err = decodeUint[FrameType](r)
		case "q":
			f.Seq, err = decodeInt[int64](r)
		case "p":
			f.Payload, err = r.payload()
		case "h":
			err = r.metadata(&f.Header)
		case "in":
			f.Inbox, err = r.string()
		case "wk":
			f.Worker, err = r.string()
		case "w":
			f.Window, err = decodeInt[int](r)
		case "wb":
			f.WindowBytes, err = decodeInt[int64](r)
		case "cn":
			f.Consumed, err = decodeInt[int64](r)
		case "cb":
			f.ConsumedBytes, err = decodeInt[int64](r)
		case "sz":
			f.Size, err = decodeInt[int64](r)
		default:
			err = errUnknownField
		}
		return err
	})
}
