package testenv

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the driver coordd's embedded store uses
)

// SQLiteStall is the embedded store's outage: the test holds the write lock
// of the store's file, so every write of every process that uses it waits
// in its busy handler (renewals of leases included) until Start releases
// it. It has the Kill/Start/Running shape of the private servers, so a
// fault schedule can treat it as the store's "restart".
type SQLiteStall struct {
	// Path is the SQLite file.
	Path string

	mu   sync.Mutex
	db   *sql.DB
	conn *sql.Conn
}

// Kill takes the write lock and keeps it (waiting up to 30 s for it).
func (s *SQLiteStall) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("sqlite", "file:"+s.Path+"?_pragma=busy_timeout(30000)")
	if err != nil {
		return
	}
	conn, err := db.Conn(ctx)
	if err == nil {
		// The store is in WAL mode: EXCLUSIVE blocks the writers, readers
		// go on.
		_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
	}
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		_ = db.Close()
		return
	}
	s.db, s.conn = db, conn
}

// Start releases the lock.
func (s *SQLiteStall) Start(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return
	}
	if _, err := s.conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Errorf("testenv: releasing the sqlite stall: %v", err)
	}
	_ = s.conn.Close()
	_ = s.db.Close()
	s.db, s.conn = nil, nil
}

// Running reports whether the store is not stalled.
func (s *SQLiteStall) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn == nil
}

// ReleaseAfter calls Start after d, in the background; the channel is
// closed once the lock is released.
func (s *SQLiteStall) ReleaseAfter(t testing.TB, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d)
		s.Start(t)
	}()
	return done
}
