package transport

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestTransportImportsNoBrokerInternals keeps the boundary ARCHITECTURE.md
// states: the transport reaches the broker only through Backend, so it must
// not import the actor packages or storage.
func TestTransportImportsNoBrokerInternals(t *testing.T) {
	forbidden := []string{"/streams", "/subscribers", "/lanes", "/broker", "/persistence", "/actors"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		parsed, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, imp := range parsed.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if !strings.HasPrefix(path, "github.com/getfelix/felix-go") {
				continue
			}
			for _, bad := range forbidden {
				if strings.HasSuffix(path, bad) {
					t.Errorf("%s imports %s; the transport must reach the broker only through transport.Backend", f, path)
				}
			}
		}
	}
}
