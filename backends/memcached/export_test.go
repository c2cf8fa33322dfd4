package memcached

// DeleteSemSlot deletes slot key `slot` of semaphore name (tests: drift,
// eviction).
func DeleteSemSlot(s *Store, name string, slot int) error {
	err := s.mc.Delete(s.keys.semSlot(name, slot))
	if isGone(err) {
		return nil
	}
	return err
}

// SemKeys are the keys of semaphore name (tests reach behind coordd's back).
func SemKeys(s *Store, name string) (cfg, fencing, ctr, hold string) {
	return s.keys.semCfg(name), s.keys.semFencing(name), s.keys.semCtr(name), s.keys.semHold(name)
}

// SetCounterHook sets the hook run after a losing increment (counter.go).
func SetCounterHook(h func(name string) bool) { counterHook = h }

// KeptGrant is the slot and cas id the store kept of owner's grant on
// name for a direct release (semaphore.go, grantCas).
func KeptGrant(s *Store, name, owner string) (slot int, casID uint64, ok bool) {
	s.grantMu.Lock()
	defer s.grantMu.Unlock()
	g, ok := s.grants[grantKey(name, owner)]
	return g.slot, g.casID, ok
}

// SemSlotKey is the key of slot `slot` of semaphore name.
func SemSlotKey(s *Store, name string, slot int) string { return s.keys.semSlot(name, slot) }
