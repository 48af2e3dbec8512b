package xread

import "github.com/redis/go-redis/v9"

// Entry is one stream entry: its id and its fields and values, in pairs
// (field, value, field, value, ...) as Redis stored them.
type Entry struct {
	ID     string
	Fields []string
	// Lent are the buffers the entry's large values are in, when its
	// Reader lends them (Reader.LendBodies); nil otherwise.
	Lent []*[]byte
}

// Value returns the value of field, and whether the entry has it. An entry
// that names a field twice (XADD allows it) gives the last value, as
// go-redis's map of the entry did.
func (e Entry) Value(field string) (value string, ok bool) {
	for i := 0; i+1 < len(e.Fields); i += 2 {
		if e.Fields[i] == field {
			value, ok = e.Fields[i+1], true
		}
	}
	return value, ok
}

// FromMessages turns entries go-redis parsed (from XRANGE or XAUTOCLAIM)
// into Entry values. Values go-redis did not read as strings are left out.
func FromMessages(msgs []redis.XMessage) []Entry {
	if len(msgs) == 0 {
		return nil
	}
	entries := make([]Entry, len(msgs))
	for i, m := range msgs {
		fields := make([]string, 0, 2*len(m.Values))
		for k, v := range m.Values {
			if s, ok := v.(string); ok {
				fields = append(fields, k, s)
			}
		}
		entries[i] = Entry{ID: m.ID, Fields: fields}
	}
	return entries
}
