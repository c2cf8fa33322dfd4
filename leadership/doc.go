// Package leadership elects one coordd host as the leader of a cluster, the
// only host whose scheduler claims cron occurrences. It follows River's
// internal/leadership: a lease row in the cluster backend, held by one
// holder, scoped to a term.
//
// # The lease
//
// The backend keeps one leader row: holder, term and expiry, all in backend
// time (see backends.Leader). ElectLeader takes the row when it is free,
// expired or resigned, starting a new term with a higher number;
// RenewLeader extends it only for exactly the holder and term that hold it,
// so a host that lost the lease (even briefly) can never renew a later term
// by mistake. The holder id is the host id plus the pid and a random suffix,
// so two processes on one host never share a term.
//
// # The state machine
//
//	follower --ElectLeader ok--> leader
//	leader   --RenewLeader ok--> leader (trust window moves forward)
//	leader   --ErrNotLeader----> follower (at once: someone else holds it)
//	leader   --renew fails, trust window closed--> follower
//	leader   --ctx ends--> ResignLeader, follower
//
// A follower does not poll the election. It reads the lease
// (CurrentLeader): when nobody holds it, it campaigns at once; otherwise it
// sleeps until 20 ms after that lease expires, converting the expiry (backend
// time) with the offset between the backend's clock and its own, measured
// with one Now every ten minutes. A leader that dies without resigning
// (kill -9) is therefore replaced about 20 ms after its lease expires:
// failover takes at most Lease plus a round trip or two. A follower also
// never sleeps longer than Lease/2, so that a lease ended early by
// ResignLeader (a graceful shutdown) is taken within Lease/2. An idle
// follower thus reads the lease twice per Lease; a backend without a clock
// (no Now) makes it fall back to a campaign every Lease/8.
//
// A leader renews every Lease/2; a failed renewal is retried every Lease/10
// until it succeeds or the trust window closes. The renewal interval does
// not change failover: a dead leader's lease ends Lease after its last
// renewal, however often it renewed.
//
// # The trust window
//
// The leader does not read the backend's expiry to decide whether it still
// leads: the backend's clock and this host's may disagree. It trusts itself
// only until a deadline on its own monotonic clock:
//
//	trusted until = send time of the last successful elect/renew + Lease − margin
//	margin        = min(Lease/5, 1s)
//
// The backend started the lease no earlier than the request was sent, so the
// deadline can only be early, never late; the margin absorbs clock-rate
// differences and the time the reply took. Leading reports true only inside
// the window, whatever the renewing goroutine is doing, so a leader whose
// process was paused or whose backend hangs stops claiming by itself.
//
// # Stepping down when unsure
//
// When renewals fail (the backend is unreachable, slow, or returns errors)
// the leader keeps trying, but once the trust window closes it steps down:
// it publishes false to its subscribers and goes back to campaigning. It
// does not wait to learn whether the lease really expired; being unsure is
// enough, because the lease may have expired and another host may lead.
// ErrNotLeader steps down at once. On shutdown the leader resigns its term
// (with a bounded context), so another host takes over without waiting for
// the lease to expire.
//
// Leadership is an optimisation, not the safety mechanism: every claim of an
// occurrence is a compare-and-swap in the backend, so two hosts that both
// believe they lead still never start the same occurrence twice.
package leadership
