package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watcher reports that the spec at path may have changed. It watches the
// path and its parent directory with fsnotify, which covers an editor that
// renames a new file over the old one, a git checkout, and a directory that
// is an atomically swapped symlink (git-sync, Kubernetes ConfigMaps): inotify
// watches the target a symlink resolved to when the watch was added, so after
// every event the watches are added again. A slow fingerprint poll backs it
// up for file systems without inotify (NFS) and for swaps further up the
// tree.
type watcher struct {
	path     string
	debounce time.Duration
	poll     time.Duration
}

// run calls changed, at most once per debounce window, until ctx ends.
func (w *watcher) run(ctx context.Context, changed func()) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.path, err)
	}
	defer fw.Close()
	w.rewatch(fw)
	last := fingerprint(w.path)

	var fire <-chan time.Time
	var debounce *time.Timer
	poll := time.NewTicker(w.poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			if debounce != nil {
				debounce.Stop()
			}
			return nil
		case _, ok := <-fw.Events:
			if !ok {
				return nil
			}
			if debounce == nil {
				debounce = time.NewTimer(w.debounce)
			} else {
				debounce.Reset(w.debounce)
			}
			fire = debounce.C
		case _, ok := <-fw.Errors:
			if !ok {
				return nil
			}
		case <-poll.C:
			if fp := fingerprint(w.path); fp != last {
				last = fp
				changed()
			}
		case <-fire:
			fire = nil
			w.rewatch(fw)
			last = fingerprint(w.path)
			changed()
		}
	}
}

// rewatch (re)adds watches on the path and its parent. Errors are ignored:
// a path that does not exist right now (mid-swap) is picked up by the next
// event or poll.
func (w *watcher) rewatch(fw *fsnotify.Watcher) {
	for _, p := range fw.WatchList() {
		_ = fw.Remove(p)
	}
	_ = fw.Add(filepath.Dir(filepath.Clean(w.path)))
	if fi, err := os.Stat(w.path); err == nil && fi.IsDir() {
		_ = fw.Add(w.path)
	}
}

// fingerprint hashes the names, sizes, modification times and inodes of the
// spec files as they resolve now. It reads no content.
func fingerprint(path string) string {
	h := sha256.New()
	add := func(p string) {
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(h, "%s:missing\n", p)
			return
		}
		fmt.Fprintf(h, "%s:%d:%d:%v\n", p, fi.Size(), fi.ModTime().UnixNano(), inode(fi))
	}
	real, _ := filepath.EvalSymlinks(path)
	fmt.Fprintf(h, "real:%s\n", real)
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		add(path)
		return hex.EncodeToString(h.Sum(nil))
	}
	ents, _ := os.ReadDir(path)
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		if ext := filepath.Ext(n); ext == ".yaml" || ext == ".yml" {
			add(filepath.Join(path, n))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
