package wire

import "strconv"

// codeNames are the status codes' canonical names, indexed by number: a
// response carries its status as gRPC's number for it (Response.Code), so
// codes mean the same on both sides of a gateway and in dashboards.
var codeNames = [...]string{
	0:  "OK",
	1:  "CANCELED",
	2:  "UNKNOWN",
	3:  "INVALID_ARGUMENT",
	4:  "DEADLINE_EXCEEDED",
	5:  "NOT_FOUND",
	6:  "ALREADY_EXISTS",
	7:  "PERMISSION_DENIED",
	8:  "RESOURCE_EXHAUSTED",
	9:  "FAILED_PRECONDITION",
	10: "ABORTED",
	11: "OUT_OF_RANGE",
	12: "UNIMPLEMENTED",
	13: "INTERNAL",
	14: "UNAVAILABLE",
	15: "DATA_LOSS",
	16: "UNAUTHENTICATED",
}

// CodeName returns the canonical upper-case name of status code c, e.g.
// "NOT_FOUND", or "CODE(n)" for a number outside the set.
func CodeName(c uint32) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// ParseCode reads a status code from its canonical name ("NOT_FOUND") or
// its number ("5").
func ParseCode(s string) (uint32, bool) {
	for i, name := range codeNames {
		if name == s {
			return uint32(i), true
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n >= uint64(len(codeNames)) {
		return 0, false
	}
	return uint32(n), true
}
