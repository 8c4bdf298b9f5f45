package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load returns Default overlaid with the YAML file (skipped when file is ""),
// then the FELIX_* variables in environ (os.Environ's form), validated.
//
// A CLI with flags does the steps itself so flags win and validation sees the
// final values: Default, LoadFile, LoadEnv, Flags.Apply, its own fields, Validate.
func Load(file string, environ []string) (Config, error) {
	c := Default()
	if file != "" {
		if err := LoadFile(file, &c); err != nil {
			return Config{}, err
		}
	}
	if err := LoadEnv(environ, &c); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadFile sets the knobs a YAML file names, leaving the rest of into as it
// was. The file is one mapping of knob names (the yaml tags) to values. Every
// problem is reported at once, each naming the file, line and key: an unknown
// key, a repeated key, or a value that does not parse. On error into may be
// partly updated.
//
// The file is walked as a yaml.Node rather than decoded with
// Decoder.KnownFields(true): a decode into Config cannot read "64MiB" or a
// millisecond count, and KnownFields' message names a shadow type instead of
// the file and a likely spelling.
func LoadFile(path string, into *Config) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()

	dec := yaml.NewDecoder(f)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return fmt.Errorf("config: %s: %w", path, err)
	}
	// A second document would otherwise be ignored without a word.
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return fmt.Errorf("config: %s: want one YAML document", path)
	}

	root := doc.Content[0] // a DocumentNode holds exactly one node
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config: %s:%d: want a mapping of knob names to values", path, root.Line)
	}
	var errs []error
	seen := make(map[string]int, len(root.Content)/2)
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], root.Content[i+1]
		k, ok := knobByKey[kn.Value]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("config: %s:%d: unknown key %q%s",
				path, kn.Line, kn.Value, didYouMean(kn.Value, func(k knob) string { return k.key })))
		case seen[k.key] != 0:
			errs = append(errs, fmt.Errorf("config: %s:%d: %s: repeats line %d", path, kn.Line, k.key, seen[k.key]))
		case vn.Kind != yaml.ScalarNode:
			errs = append(errs, fmt.Errorf("config: %s:%d: %s: want a single value", path, vn.Line, k.key))
		default:
			seen[k.key] = kn.Line
			val := vn.Value
			if vn.Tag == "!!null" {
				val = "" // "tls_cert:" and "tls_cert: ~" mean empty
			}
			if err := k.set(into, val); err != nil {
				errs = append(errs, fmt.Errorf("config: %s:%d: %s: %w", path, vn.Line, k.key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ClientEnv are the FELIX_ variables the client commands read, which are
// not knobs: LoadEnv skips them, so a shell that exports FELIX_TOKEN for
// felix pub can still run felix broker.
var ClientEnv = []string{"FELIX_TOKEN"}

// LoadEnv sets the knobs named by FELIX_* variables in environ ("NAME=value"
// entries, as from os.Environ), leaving the rest of into as it was. A knob's
// variable is FELIX_ and its upper-case key; its value parses as in a file.
// Any other FELIX_ variable is an error, since it is almost always a typo that
// would otherwise be silently ignored, except ClientEnv's. On error into may
// be partly updated.
func LoadEnv(environ []string, into *Config) error {
	var errs []error
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FELIX_") || slices.Contains(ClientEnv, name) {
			continue
		}
		k, ok := knobByEnv[name]
		if !ok {
			errs = append(errs, fmt.Errorf("config: unknown environment variable %s%s; known: %s",
				name, didYouMean(name, knob.envName), strings.Join(envNames(), ", ")))
			continue
		}
		if err := k.set(into, val); err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func envNames() []string {
	names := make([]string, len(knobs))
	for i, k := range knobs {
		names[i] = k.envName()
	}
	return names
}

// YAML prints c with the file's keys and units (durations as integer ms or µs,
// sizes in bytes), so --print-config output loads back as a config file.
func (c Config) YAML() ([]byte, error) {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range knobs {
		val, tag := k.format(&c)
		m.Content = append(m.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.key},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: val})
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return out, nil
}
