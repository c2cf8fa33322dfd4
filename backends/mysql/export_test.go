package mysql

// Internals that the external tests of this package look at.

// SlotLockForTest is the GET_LOCK name of a session-mode slot.
func (s *Store) SlotLockForTest(name string, i int) string { return s.slotLock(name, i) }

// WaitLockForTest is the wait lock of a session-mode semaphore (wake poll).
func (s *Store) WaitLockForTest(name string) string { return s.waitLock(name) }

// ParkPatternForTest matches the processlist text of waiters parked on a
// session-mode semaphore (wake kill).
func (s *Store) ParkPatternForTest(name string) string {
	return parkPattern(s.channel("semaphore", name))
}

// SessionsForTest counts session-mode holds and waits the store keeps.
func (s *Store) SessionsForTest() (held, waiting int) {
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	return len(s.sess.held), len(s.sess.waiting)
}
