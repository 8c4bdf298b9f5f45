package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// knob is one Config field as the loaders see it. The YAML file, FELIX_*
// variables, flags and the YAML output all walk knobs, which are read from the
// struct tags, so adding a field with a yaml tag adds it everywhere at once.
type knob struct {
	key   string        // the yaml tag, e.g. "auth_timeout_ms"
	help  string        // the help tag: what the knob does, for flag usage
	index int           // field index in Config
	unit  time.Duration // durations only: what a bare integer counts, from the key's suffix
	bytes bool          // a byte size: also accepts "64MiB"
}

var (
	knobs     = readKnobs(reflect.TypeFor[Config]())
	knobByKey = indexKnobs(func(k knob) string { return k.key })
	knobByEnv = indexKnobs(knob.envName)
)

func indexKnobs(name func(knob) string) map[string]knob {
	m := make(map[string]knob, len(knobs))
	for _, k := range knobs {
		m[name(k)] = k
	}
	return m
}

// A duration key's suffix says what its integer counts (as in
// auth_timeout_ms), so a bare number is never ambiguous.
var (
	durationUnits = map[string]time.Duration{"_ms": time.Millisecond, "_us": time.Microsecond}
	unitName      = map[time.Duration]string{time.Millisecond: "milliseconds", time.Microsecond: "microseconds"}
)

// readKnobs reads the knobs of t, which is Config outside tests. It panics
// on a field the loaders cannot handle, so a new field without its tags
// fails every test rather than shipping half-wired.
func readKnobs(t reflect.Type) []knob {
	ks := make([]knob, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		k := knob{key: f.Tag.Get("yaml"), help: f.Tag.Get("help"), index: i}
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			k.unit = durationUnits[k.key[max(0, strings.LastIndexByte(k.key, '_')):]]
			if k.unit == 0 {
				panic("config: duration field " + f.Name + " needs a key ending in _ms or _us")
			}
		case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
			k.bytes = strings.Contains(k.key, "_bytes")
		case f.Type.Kind() == reflect.String || f.Type.Kind() == reflect.Bool:
		default:
			panic("config: field " + f.Name + " has a type the loaders cannot parse: " + f.Type.String())
		}
		if k.key == "" {
			panic("config: field " + f.Name + " has no yaml tag")
		}
		if k.help == "" {
			panic("config: field " + f.Name + " has no help tag (its one-line description in felix broker --help)")
		}
		ks = append(ks, k)
	}
	return ks
}

func (k knob) envName() string  { return "FELIX_" + strings.ToUpper(k.key) }
func (k knob) flagName() string { return strings.ReplaceAll(k.key, "_", "-") }

// set parses s into k's field of c. Every source (YAML scalar, variable, flag)
// goes through here, so a value means the same thing wherever it is written.
func (k knob) set(c *Config, s string) error {
	v := reflect.ValueOf(c).Elem().Field(k.index)
	switch {
	case k.unit != 0:
		d, err := parseDuration(s, k.unit)
		if err != nil {
			return k.rangeHint(err)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("bad boolean %q: want true or false", s)
		}
		v.SetBool(b)
	default:
		var n int64
		var err error
		if k.bytes {
			n, err = parseBytes(strings.TrimSpace(s))
		} else if n, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil {
			// ParseInt's errors are *NumError; keep only the cause, as s is named here.
			err = fmt.Errorf("bad integer %q: %w", s, err.(*strconv.NumError).Err)
		}
		if !k.bytes && errors.Is(err, strconv.ErrRange) || err == nil && v.OverflowInt(n) {
			err = fmt.Errorf("%q is out of range: at most %d: %w", s, int64(1)<<(v.Type().Bits()-1)-1, strconv.ErrRange)
		}
		if err != nil {
			return k.rangeHint(err)
		}
		v.SetInt(n)
	}
	return nil
}

// rangeHint adds what 0 means to a range error, from the knob's help tag
// ("0 keeps everything"): someone who wrote 584 years of retention meant
// "for ever", and that is 0, not a larger number.
func (k knob) rangeHint(err error) error {
	if !errors.Is(err, strconv.ErrRange) {
		return err
	}
	for clause := range strings.SplitSeq(k.help, "; ") {
		if strings.HasPrefix(clause, "0 ") {
			return fmt.Errorf("%w (%s)", err, clause)
		}
	}
	return err
}

// format is set's inverse: integers in the key's unit, so printed output can
// be loaded back. It also returns the YAML tag that keeps the value's type.
func (k knob) format(c *Config) (value, tag string) {
	v := reflect.ValueOf(c).Elem().Field(k.index)
	switch {
	case k.unit != 0:
		if d := time.Duration(v.Int()); d%k.unit != 0 {
			return d.String(), "!!str" // e.g. 1.5ms in a _ms key: exact, and set reads it back
		}
		return strconv.FormatInt(v.Int()/int64(k.unit), 10), "!!int"
	case v.Kind() == reflect.String:
		return v.String(), "!!str"
	case v.Kind() == reflect.Bool:
		return strconv.FormatBool(v.Bool()), "!!bool"
	default:
		return strconv.FormatInt(v.Int(), 10), "!!int"
	}
}

// parseDuration reads an integer count of unit, or a Go duration such as "250us".
func parseDuration(s string, unit time.Duration) (time.Duration, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil && (n > math.MaxInt64/int64(unit) || n < math.MinInt64/int64(unit)) {
		err = strconv.ErrRange
	}
	var numErr *strconv.NumError
	switch {
	case err == nil:
		return time.Duration(n) * unit, nil
	case errors.Is(err, strconv.ErrRange) || errors.As(err, &numErr) && numErr.Err == strconv.ErrRange:
		// The multiplication would wrap: 18446744073710 ms once became
		// 0.45 ms of retention.
		return 0, fmt.Errorf("%s is out of range: at most %d %s (about 292 years, the longest duration): %w",
			s, math.MaxInt64/int64(unit), unitName[unit], strconv.ErrRange)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want integer %s or a duration like \"250us\": %w", unitName[unit], err)
	}
	return d, nil
}

// byteUnits: decimal units are powers of 1000 and binary ones powers of 1024,
// as the names say; "5GB" and "5GiB" are different sizes.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": kib, "mib": mib, "gib": gib, "tib": 1 << 40,
}

// ParseBytes reads a byte size as the loaders do for every *_bytes knob: a
// plain integer, or an integer and a unit, B, KB, MB, GB, TB (powers of 1000)
// or KiB, MiB, GiB, TiB (powers of 1024), e.g. "64MiB", "16 KiB", "5GB". Units
// ignore case. It is a small parser written here, not a library's: fractions
// and negative sizes are refused so a size is always an exact byte count.
func ParseBytes(s string) (int64, error) {
	n, err := parseBytes(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("config: %w", err)
	}
	return n, nil
}

func parseBytes(s string) (int64, error) {
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(s)
	}
	mult, ok := byteUnits[strings.ToLower(strings.TrimSpace(s[end:]))]
	if end == 0 || !ok {
		return 0, fmt.Errorf("bad byte size %q: want an integer and an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	n, err := strconv.ParseInt(s[:end], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("byte size %q is out of range: at most %d bytes (8 EiB): %w", s, int64(math.MaxInt64), strconv.ErrRange)
	}
	return n * mult, nil
}

// didYouMean names the knob whose name is nearest s, for an error message, or
// returns "" when none is near enough to be a likely typo.
func didYouMean(s string, name func(knob) string) string {
	best, bestDist := "", 4 // more than 3 edits is a different name, not a typo
	for _, k := range knobs {
		if d := editDistance(s, name(k)); d < bestDist {
			best, bestDist = name(k), d
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

// editDistance is the Levenshtein distance, in bytes (knob names are ASCII).
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
