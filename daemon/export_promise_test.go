package daemon

// ReconcileErr is what the daemon counts in coordd_reconcile_errors_total
// for an apply or resync that returned err.
var ReconcileErr = reconcileErr
