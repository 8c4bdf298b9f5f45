package config

import (
	"reflect"
	"strings"

	"github.com/spf13/pflag"
)

// cliOwned are the knobs the CLI exposes under its own flags (--listen,
// --data-dir, --addr-file, --log-level) and sets on Config directly, so
// RegisterFlags leaves those names to it.
var cliOwned = map[string]bool{"listen": true, "data_dir": true, "addr_file": true, "log_level": true}

// Flags holds the knob flags registered on one FlagSet.
type Flags struct {
	fs *pflag.FlagSet
	// vals receives parsed flag values. Apply copies only the fields whose flag
	// was given, so a flag's default never undoes the file or environment.
	vals Config
}

// RegisterFlags adds a flag per knob to fs, named by its key in kebab case
// (--subscriber-queue-capacity, --auth-timeout-ms), except the CLI-owned ones.
// Values parse as in a file. After fs.Parse, call Apply.
func RegisterFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{fs: fs, vals: Default()}
	for _, k := range knobs {
		if cliOwned[k.key] {
			continue
		}
		v := &knobValue{k: k, c: &f.vals}
		fl := fs.VarPF(v, k.flagName(), "", k.usage())
		if v.Type() == "bool" {
			fl.NoOptDefVal = "true" // --subscriber-single-writer-per-conn alone means true
		}
	}
	return f
}

// Apply sets on c the knobs whose flags were given on the command line.
func (f *Flags) Apply(c *Config) {
	dst, src := reflect.ValueOf(c).Elem(), reflect.ValueOf(&f.vals).Elem()
	for _, k := range knobs {
		if !cliOwned[k.key] && f.fs.Changed(k.flagName()) {
			dst.Field(k.index).Set(src.Field(k.index))
		}
	}
}

// knobValue is a pflag.Value writing one knob of c.
type knobValue struct {
	k knob
	c *Config
}

func (v *knobValue) Set(s string) error { return v.k.set(v.c, s) }

func (v *knobValue) String() string {
	s, _ := v.k.format(v.c)
	return s
}

func (v *knobValue) Type() string {
	switch {
	case v.k.unit != 0:
		return "duration"
	case v.k.bytes:
		return "bytes"
	}
	return reflect.TypeFor[Config]().Field(v.k.index).Type.Kind().String() // int, int64, string, bool
}

// FlagUsage is the usage line of the flag for knob key (a yaml key such as
// "data_dir"): what it does, what its values look like, and its variable.
// The CLI uses it for the knobs whose flags it registers itself. It panics
// on an unknown key: the CLI names its own knobs, so that is a typo.
func FlagUsage(key string) string {
	k, ok := knobByKey[key]
	if !ok {
		panic("config: FlagUsage of unknown knob " + key)
	}
	return k.usage()
}

func (k knob) usage() string {
	parts := []string{k.help}
	switch {
	case k.unit != 0:
		parts = append(parts, unitName[k.unit]+", or a duration like 250us")
	case k.bytes:
		parts = append(parts, "bytes, or a size like 64MiB")
	case choices[k.key] != nil:
		parts = append(parts, strings.Join(choices[k.key], ", "))
	}
	return strings.Join(append(parts, "env "+k.envName()), "; ")
}
