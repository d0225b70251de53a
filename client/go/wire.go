// wire.go: the line codec of the dlockd protocol (proto/PROTOCOL.md):
// request lines out, reply and event lines in, and the value checks.

package dlockd

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits of the protocol (proto/limits.h).
const (
	nameMax       = 255
	reasonMax     = 128 // a BREAK's reason= (DL_REASON_MAX)
	ownerMax      = 64
	keyMin        = 16
	keyMax        = 64
	descHostMax   = 64
	descCmdMax    = 128
	valueMax      = 128 // a lease's value= as sent (DL_VALUE_MAX)
	limitMax      = 1024
	durationMaxMs = 1_000_000_000_000
	replyLineMax  = 65536
	defaultPort   = 7420
	defaultTTLMs  = 30000
	bodyLinesMax  = 2*1000 + 1000 + 128
	bodyBytesMax  = 4 << 20 // a HOLDERS body: its lines are a few hundred bytes
	reentryMax    = 1<<24 - 1
)

func printableWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return false
		}
	}
	return s != ""
}

func checkName(name, what string) error {
	if len(name) < 1 || len(name) > nameMax || !printableWord(name) || strings.Contains(name, "=") {
		return newErr(ErrInvalid, fmt.Sprintf("bad %s %q: 1-%d printable ASCII characters, no space or '='", what, name, nameMax))
	}
	return nil
}

// checkPattern: a name, or a prefix followed by '*' ("*" alone: every lock).
func checkPattern(p string) error {
	if p == "*" {
		return nil
	}
	return checkName(strings.TrimSuffix(p, "*"), "watch pattern")
}

func checkOwner(o string) error {
	if len(o) < 1 || len(o) > ownerMax || !printableWord(o) || strings.Contains(o, "=") {
		return newErr(ErrInvalid, fmt.Sprintf("bad owner id %q: 1-%d printable ASCII characters, no space or '='", o, ownerMax))
	}
	return nil
}

func checkKey(k string) error {
	ok := len(k) >= keyMin && len(k) <= keyMax
	for i := 0; ok && i < len(k); i++ {
		c := k[i]
		ok = c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
	}
	if !ok {
		return newErr(ErrInvalid, fmt.Sprintf("bad owner key: %d to %d letters, digits, - or _", keyMin, keyMax))
	}
	return nil
}

func checkUser(u string) error {
	ok := len(u) >= 1 && len(u) <= 32
	for i := 0; ok && i < len(u); i++ {
		c := u[i]
		ok = c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
	}
	if !ok {
		return newErr(ErrInvalid, fmt.Sprintf("bad user name %q: 1-32 letters, digits, . _ -", u))
	}
	return nil
}

func checkCluster(id string) error {
	ok := len(id) == 32
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
	}
	if !ok {
		return newErr(ErrInvalid, fmt.Sprintf("bad cluster id %q: 32 hex digits", id))
	}
	return nil
}

// descEncode is a description's text as HELLO sends it (proto/desc.h):
// printable ASCII kept, a space or '%' escaped, anything else '?'; cut
// to max bytes, never inside an escape.
func descEncode(text string, max int) string {
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		c := text[i]
		var e string
		switch {
		case c == ' ' || c == '%':
			e = fmt.Sprintf("%%%02X", c)
		case c >= '!' && c <= '~':
			e = string(c)
		default:
			e = "?"
		}
		if b.Len()+len(e) > max {
			break
		}
		b.WriteString(e)
	}
	return b.String()
}

// descDecode is what a description's value says, for people.
func descDecode(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if n, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil && n >= 0x20 && n <= 0x7e {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		if v[i] >= ' ' && v[i] <= '~' {
			b.WriteByte(v[i])
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}

// line builds one request line.
type line struct{ b strings.Builder }

func newLine(verb string, words ...string) *line {
	l := &line{}
	l.b.WriteString(verb)
	for _, w := range words {
		l.b.WriteByte(' ')
		l.b.WriteString(w)
	}
	return l
}

func (l *line) kv(k, v string) *line {
	if v != "" {
		l.b.WriteByte(' ')
		l.b.WriteString(k)
		l.b.WriteByte('=')
		l.b.WriteString(v)
	}
	return l
}

func (l *line) String(tag string) string {
	l.kv("id", tag)
	l.b.WriteString("\r\n")
	return l.b.String()
}

// reply is one line from the server: kind OK, NO, ERR or "*" (an event),
// word the second word, args the words after it (the tag taken off).
type reply struct {
	kind, word string
	args       []string
	tag        string
}

func (r *reply) kv(key string) (string, bool) {
	p := key + "="
	for _, a := range r.args {
		if strings.HasPrefix(a, p) {
			return a[len(p):], true
		}
	}
	return "", false
}

func (r *reply) kvs(key string) string { v, _ := r.kv(key); return v }

// uarg is args[i] as a decimal u64 (ok false if it is not).
func (r *reply) uarg(i int) (uint64, bool) {
	if i >= len(r.args) {
		return 0, false
	}
	v, err := strconv.ParseUint(r.args[i], 10, 64)
	return v, err == nil
}

func (r *reply) text() string {
	return strings.Join(append([]string{r.kind, r.word}, r.args...), " ")
}

// parseReply parses a reply or event line; nil if it is not protocol.
func parseReply(s string) *reply {
	for i := 0; i < len(s); i++ {
		if (s[i] < ' ' || s[i] > '~') && s[i] != '\t' {
			return nil
		}
	}
	words := strings.Fields(s)
	if len(words) < 2 {
		return nil
	}
	switch words[0] {
	case "OK", "NO", "ERR", "*":
	default:
		return nil
	}
	r := &reply{kind: words[0], word: words[1], args: words[2:]}
	if n := len(r.args); n > 0 && strings.HasPrefix(r.args[n-1], "id=") {
		r.tag = r.args[n-1][3:]
		r.args = r.args[:n-1]
	}
	return r
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func atou(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
