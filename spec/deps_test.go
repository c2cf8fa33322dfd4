package spec

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSpecLinksNoDatabaseDriver: the spec package, which every coordd
// package and Go API user imports, checks MySQL DSNs with
// internal/mysqldsn and links no database driver or client of a store.
func TestSpecLinksNoDatabaseDriver(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	banned := []string{"database/sql", "github.com/go-sql-driver/", "github.com/jackc/", "modernc.org/sqlite", "github.com/redis/", "github.com/bradfitz/gomemcache"}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	for _, dep := range deps {
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("spec links %s", dep)
			}
		}
	}
}
