package mysql

// PushTxForTest makes s push as on MySQL, which has no INSERT ...
// RETURNING: a transaction of the INSERT and a read of the new job.
func (s *Store) PushTxForTest() { s.queues.pushTx.Store(true) }
