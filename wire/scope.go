package wire

import "strings"

// MaxNameLen bounds a tenant, namespace or stream name.
const MaxNameLen = 128

// TrashSuffix marks the folder a deleted durable stream's data is renamed
// to before it is removed: <stream>.deleted-<unix nanoseconds>. No name may
// end like it, or a stream could be created inside another's trash (issue
// 11), so ValidateName refuses "<anything>.deleted-<digits>".
const TrashSuffix = ".deleted-"

// Scope names a stream: (tenant, namespace, stream).
type Scope struct {
	Tenant    string
	Namespace string
	Stream    string
}

func (s Scope) String() string { return s.Tenant + "/" + s.Namespace + "/" + s.Stream }

// Validate checks each name: 1 to MaxNameLen bytes of [A-Za-z0-9._-]. The
// character set keeps names safe as file names (durable logs) and actor path
// elements, and unambiguous when joined with "/".
func (s Scope) Validate() error {
	for _, f := range [...]struct{ what, v string }{{"tenant", s.Tenant}, {"namespace", s.Namespace}, {"stream", s.Stream}} {
		if err := ValidateName(f.what, f.v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateName checks one name and returns an invalid_request error naming it.
func ValidateName(what, v string) error {
	if len(v) == 0 || len(v) > MaxNameLen {
		return NewError(CodeInvalidRequest, "%s name must be 1 to %d bytes, got %d", what, MaxNameLen, len(v))
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return NewError(CodeInvalidRequest, "%s name %q has %q at byte %d; use letters, digits, '.', '_' or '-'", what, v, c, i)
		}
	}
	if v == "." || v == ".." {
		return NewError(CodeInvalidRequest, "%s name %q is reserved", what, v)
	}
	if isTrashName(v) {
		return NewError(CodeInvalidRequest, "%s name %q ends like the broker's trash folders (%s<number>, where a deleted durable stream's data goes); choose another name", what, v, TrashSuffix)
	}
	return nil
}

// isTrashName reports whether v ends in TrashSuffix and digits.
func isTrashName(v string) bool {
	i := strings.LastIndex(v, TrashSuffix)
	if i < 0 {
		return false
	}
	digits := v[i+len(TrashSuffix):]
	return digits != "" && strings.Trim(digits, "0123456789") == ""
}
