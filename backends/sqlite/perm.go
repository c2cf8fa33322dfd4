package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// fileMode is the mode of a store file coordd creates. The store holds
// owner tokens, job payloads and cron output, so it is private to the
// daemon's user.
//
// SQLite creates a new database file 0644, and later creates its -wal and
// -shm files with the mode of the database file. The database file cannot
// simply be created 0600 beforehand: processes that open a new file
// together then trip over each other's journals (TestConcurrentOpenMigrate
// saw SQLITE_IOERR_DELETE). So Open lets SQLite create the (still empty)
// file, tightens it before switching to WAL, and tightens the -wal and -shm
// files after, in case another process created them first.
const fileMode fs.FileMode = 0o600

// storeFiles are the suffixes of the files SQLite keeps beside a database
// in WAL mode.
var storeFiles = []string{"", "-wal", "-shm"}

// exists reports whether path exists (an error other than "not exist"
// counts as existing: SQLite will report it).
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// restrict tightens the files of the store at abs that belong to this
// process's user: a store this Open created (created) becomes fileMode; an
// existing one (from an older coordd, or made by the operator) keeps its
// group bits but loses any access for others. Files of another user are
// left as they are. suffixes names the files to look at.
func restrict(abs string, created bool, suffixes ...string) error {
	for _, suffix := range suffixes {
		path := abs + suffix
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		want := fi.Mode().Perm() &^ 0o007
		if created {
			want = fileMode
		}
		if fi.Mode().Perm() == want {
			continue
		}
		if err := os.Chmod(path, want); err != nil {
			return fmt.Errorf("restrict permissions of %s: %w", path, err)
		}
	}
	return nil
}
