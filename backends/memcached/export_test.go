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
