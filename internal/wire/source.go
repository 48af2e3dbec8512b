package wire

import (
	"bytes"
	"errors"
	"io"
)

// errEnded reports input that ends inside a value: a header without the
// bytes it announces, or no header where a value must follow. (The
// decoder's io.EOF said only "EOF".)
var errEnded = errors.New("the input ends in the middle of a value (truncated?)")

// envelopeSource is the bytes.Reader an envelopeReader's decoder reads,
// which reports the end of the input as errEnded.
type envelopeSource struct{ bytes.Reader }

// ReadByte implements io.ByteReader.
func (s *envelopeSource) ReadByte() (byte, error) {
	c, err := s.Reader.ReadByte()
	if err == io.EOF {
		err = errEnded
	}
	return c, err
}

// Read implements io.Reader.
func (s *envelopeSource) Read(p []byte) (int, error) {
	n, err := s.Reader.Read(p)
	if err == io.EOF {
		err = errEnded
	}
	return n, err
}
