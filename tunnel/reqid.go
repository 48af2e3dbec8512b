package tunnel

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// RequestID is a parsed request id. Ids look like
// "20261129-ORD1-1764434400123-K7P2QXM4RT": the UTC date, a four-character
// business code, the unix time in milliseconds when the call was made, and
// ten random characters. They are readable in logs, sort by time, and are
// unique across processes without coordination (50 random bits per
// millisecond and business code).
type RequestID struct {
	// Biz is the business code, e.g. "ORD1".
	Biz string
	// Time is when the id was made, to the millisecond.
	Time time.Time
	// Random is the random suffix.
	Random string
}

const (
	bizCodeLen    = 4
	randomIDLen   = 10
	idAlphabet    = "0123456789ABCDEFGHJKMNPQRSTVWXYZ" // Crockford base32: no I, L, O, U
	idDateLayout  = "20060102"
	requestIDSize = len(idDateLayout) + 1 + bizCodeLen + 1 + 13 + 1 + randomIDLen
)

// String formats the id.
func (id RequestID) String() string {
	return fmt.Sprintf("%s-%s-%013d-%s", id.Time.UTC().Format(idDateLayout), id.Biz, id.Time.UnixMilli(), id.Random)
}

// newRequestID makes a fresh id for biz at now.
func newRequestID(biz string, now time.Time) string {
	// Appended into one buffer: Format and FormatInt would each allocate.
	b := make([]byte, 0, requestIDSize)
	b = appendDate(b, now.UTC())
	b = append(b, '-')
	b = append(b, biz...)
	b = append(b, '-')
	ms := now.UnixMilli()
	for range 13 - digits(ms) {
		b = append(b, '0')
	}
	b = strconv.AppendInt(b, ms, 10)
	b = append(b, '-')
	r := rand.Uint64()
	for range randomIDLen {
		b = append(b, idAlphabet[r&31])
		r >>= 5
	}
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}

// appendDate appends t's date as idDateLayout formats it. Written out,
// because AppendFormat interprets its layout on every call: that was half
// of what making an id cost.
func appendDate(b []byte, t time.Time) []byte {
	y, m, d := t.Date()
	if y < 0 || y > 9999 {
		return t.AppendFormat(b, idDateLayout)
	}
	return append(b, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10),
		byte('0'+m/10), byte('0'+m%10), byte('0'+d/10), byte('0'+d%10))
}

// digits is how many decimal digits n (≥ 0) has.
func digits(n int64) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// ParseRequestID parses an id made by rpr and checks every part, so a
// mistyped id is reported instead of looked up in vain.
func ParseRequestID(s string) (RequestID, error) {
	parts := strings.Split(s, "-")
	if len(parts) != 4 {
		return RequestID{}, fmt.Errorf("rpr: request id %q: want DATE-BIZ4-UNIXMS-RANDOM, e.g. 20261129-ORD1-1764434400123-K7P2QXM4RT", s)
	}
	date, biz, msText, random := parts[0], parts[1], parts[2], parts[3]
	if err := ValidateBizCode(biz); err != nil {
		return RequestID{}, fmt.Errorf("rpr: request id %q: %w", s, err)
	}
	// Digits only: ParseInt would also take a sign, and "+000000000000"
	// names an id written with a 0 there, whose keys are other keys.
	ms, err := strconv.ParseInt(msText, 10, 64)
	if err != nil || len(msText) != 13 || strings.Trim(msText, "0123456789") != "" {
		return RequestID{}, fmt.Errorf("rpr: request id %q: time %q is not 13 digits of unix milliseconds", s, msText)
	}
	t := time.UnixMilli(ms).UTC()
	if t.Format(idDateLayout) != date {
		return RequestID{}, fmt.Errorf("rpr: request id %q: date %q does not match its time %s", s, date, t.Format(time.RFC3339))
	}
	if len(random) != randomIDLen || strings.Trim(random, idAlphabet) != "" {
		return RequestID{}, fmt.Errorf("rpr: request id %q: random part %q is not %d characters of %s", s, random, randomIDLen, idAlphabet)
	}
	return RequestID{Biz: biz, Time: t, Random: random}, nil
}

// ValidateBizCode reports whether code is a valid business code: exactly
// four upper-case letters or digits.
func ValidateBizCode(code string) error {
	if len(code) != bizCodeLen {
		return fmt.Errorf("business code %q must be exactly %d characters (A-Z, 0-9)", code, bizCodeLen)
	}
	for _, c := range code {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return fmt.Errorf("business code %q may hold only A-Z and 0-9", code)
		}
	}
	return nil
}

// bizCodeForService derives a business code from a service's short name:
// its first four letters or digits, upper-cased and padded with X, e.g.
// "greeter.v1.Greeter" gives "GREE".
func bizCodeForService(service string) string {
	if i := strings.LastIndexByte(service, '.'); i >= 0 {
		service = service[i+1:]
	}
	var b strings.Builder
	for _, c := range strings.ToUpper(service) {
		if b.Len() == bizCodeLen {
			break
		}
		if (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		}
	}
	for b.Len() < bizCodeLen {
		b.WriteByte('X')
	}
	return b.String()
}
