package auth

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports holds the package to doc.go's rule: of rota's packages it may import only
// internal/api and internal/atomicfile, and outside the standard library only golang.org/x/sys/unix.
func TestImports(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		ctx := build.Default
		ctx.GOOS = goos
		pkg, err := ctx.ImportDir(".", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			std := !strings.Contains(strings.Split(imp, "/")[0], ".")
			if !std && imp != "github.com/rotahq/rota/internal/api" && imp != "github.com/rotahq/rota/internal/atomicfile" && imp != "golang.org/x/sys/unix" {
				t.Errorf("GOOS=%s: auth imports %s", goos, imp)
			}
		}
	}
}
