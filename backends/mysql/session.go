package mysql

// session is one session-mode holder or waiter: its dedicated connection
// and the named locks it holds. (Work in progress.)
type session struct {
	d *dedicated
}
