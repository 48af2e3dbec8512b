package wire

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFinishedRecord: a Finished record reads back as written, with its
// keys as the README's Keys table names them; one of a later release
// (fields this one does not know) reads for what it knows; what is not
// JSON is no record.
func TestFinishedRecord(t *testing.T) {
	f := Finished{Method: "SayHello", Worker: "w1", Code: 5, Message: "not found", StartedMs: 10, DoneMs: 12, Bytes: 42}
	raw := string(f.Encode())
	if want := `{"method":"SayHello","worker":"w1","code":5,"msg":"not found","start_ms":10,"done_ms":12,"bytes":42}`; raw != want {
		t.Errorf("encoded %s, want %s", raw, want)
	}
	if got, ok := ParseFinished(raw); !ok || got != f {
		t.Errorf("read back %+v, %v", got, ok)
	}
	if got, ok := ParseFinished(`{"key":"order-1"}`); !ok || got != (Finished{Key: "order-1"}) {
		t.Errorf("an id alias reads %+v, %v", got, ok)
	}
	if got, ok := ParseFinished(`{"method":"M","bytes":3,"cpu_us":7,"spans":["a"]}`); !ok || got.Method != "M" || got.Bytes != 3 {
		t.Errorf("a later release's record reads %+v, %v", got, ok)
	}
	if _, ok := ParseFinished("v3\x00binary"); ok {
		t.Error("a record that is not JSON parsed")
	}
}

// TestCutMessage: a status message is kept whole up to
// MaxFinishedMessage bytes, and beyond cut on a character boundary.
func TestCutMessage(t *testing.T) {
	if short := strings.Repeat("a", MaxFinishedMessage); CutMessage(short) != short {
		t.Error("a message of MaxFinishedMessage bytes was cut")
	}
	long := strings.Repeat("é", MaxFinishedMessage) // 2 bytes each
	cut := CutMessage(long)
	if len(cut) > MaxFinishedMessage || !utf8.ValidString(cut) || !strings.HasSuffix(cut, "…") {
		t.Errorf("cut to %d bytes, valid UTF-8 %v: %q", len(cut), utf8.ValidString(cut), cut)
	}
}
