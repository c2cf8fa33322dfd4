package mysql

import (
	"context"
	"time"

	"github.com/coordd/coordd/backends"
)

// session is one session-mode holder or waiter: its dedicated connection
// and the named locks it holds. (Work in progress.)
type session struct {
	d *dedicated
}

// (stubs, replaced as session mode lands)
func (ss *sessions) isSession(name string) bool   { return false }
func (ss *sessions) setMode(name, mode string)    {}
func (ss *sessions) holder(owner string) *session { return nil }
func (s *Store) sessionAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	return backends.Grant{}, backends.ErrUnsupported
}
func (s *Store) sessionExtend(ctx context.Context, h *session, lease time.Duration) (time.Time, error) {
	return time.Time{}, backends.ErrUnsupported
}
func (s *Store) sessionRelease(ctx context.Context, h *session) error { return backends.ErrUnsupported }
