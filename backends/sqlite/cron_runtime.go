package sqlite

import "github.com/coordd/coordd/backends"

// The cron runtime (due tasks, claims, leases, results, history) is the
// shared store's Standard flavor, whole: sqlstore.Core.
var _ backends.Crons = (*Store)(nil)
