package spec

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dataDirChildEnv makes the test binary print DefaultDataDir and exit
// (TestMain), so that a test can ask it as another user.
const dataDirChildEnv = "COORDD_TEST_PRINT_DATA_DIR"

func TestMain(m *testing.M) {
	if os.Getenv(dataDirChildEnv) == "1" {
		fmt.Print(DefaultDataDir())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// nonRootDataDir runs this test binary as user nobody (uid 65534) with
// exactly env and returns the data directory it chooses. Run as root it
// drops privileges with setpriv(1); run as another user it needs none.
func nonRootDataDir(t *testing.T, env ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{self}
	if os.Geteuid() == 0 {
		// go test's build directory is private to root: run a copy that
		// nobody may execute.
		dir := t.TempDir()
		for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bin := filepath.Join(dir, "spec.test")
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatalf("running as root, the non-root steps need setpriv(1) (util-linux) to run as nobody: %v", err)
		}
		args = []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append([]string{dataDirChildEnv + "=1"}, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return string(out)
}

// TestPromiseDataDirNonRoot: spec.md, "The data directory": after
// $COORDD_DATA_DIR and $STATE_DIRECTORY, /var/lib/coordd only when
// running as root, else $XDG_STATE_HOME/coordd when XDG_STATE_HOME is an
// absolute path, else ~/.local/state/coordd. The non-root steps run in a
// process of user nobody.
func TestPromiseDataDirNonRoot(t *testing.T) {
	const home = "HOME=/home/someone"
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{home, "COORDD_DATA_DIR=/opt/data", "STATE_DIRECTORY=/s", "XDG_STATE_HOME=/xdg"}, "/opt/data"},
		{[]string{home, "STATE_DIRECTORY=/s1:/s2", "XDG_STATE_HOME=/xdg"}, "/s1"},
		{[]string{home, "XDG_STATE_HOME=/xdg"}, "/xdg/coordd"},
		{[]string{home, "XDG_STATE_HOME=relative/state"}, "/home/someone/.local/state/coordd"},
		{[]string{home}, "/home/someone/.local/state/coordd"},
	} {
		if got := nonRootDataDir(t, c.env...); got != c.want {
			t.Errorf("as nobody with %s: data dir %q, want %q", strings.Join(c.env, " "), got, c.want)
		}
	}
	// As root (this process, when the tests run as root), step 3 comes
	// before the XDG and home steps.
	if os.Geteuid() == 0 {
		t.Setenv("COORDD_DATA_DIR", "")
		t.Setenv("STATE_DIRECTORY", "")
		t.Setenv("XDG_STATE_HOME", "/xdg")
		if got := DefaultDataDir(); got != "/var/lib/coordd" {
			t.Errorf("as root: data dir %q, want /var/lib/coordd", got)
		}
	}
}
