// Package xread reads the replies of XREADGROUP and XREAD as Redis sends them,
// without go-redis's parsing: go-redis builds a map, boxes each value and
// allocates a string for every id, field and value of every entry, which
// at rpr's call rates is a twelfth of the CPU of a unary call and a fifth
// of the bytes it allocates. Reader has go-redis write the raw reply into
// a buffer the reading goroutine reuses, and Parse turns it into Entry
// values that share one copy of a small reply (each entry of a large one
// gets its own, so that one entry kept does not keep the others).
//
// This is written by hand because go-redis offers only its typed,
// allocating parse or raw bytes (RawWriteToCmd), and no library parses a
// RESP stream reply into strings without allocating per value. Anything
// the raw path cannot do as go-redis's typed command would (an error
// reply, which may be a Cluster redirect go-redis follows; a block that
// go-redis's read timeout would cut short) goes through the typed command
// instead, so the semantics are go-redis's.
package xread
