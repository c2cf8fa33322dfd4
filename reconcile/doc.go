// Package reconcile turns a spec into a plan and a plan into backend state,
// the way Terraform and a Kubernetes controller do.
//
// It is level-triggered. Each run compares three things and derives the plan
// from them alone, so applying twice is the same as applying once and a crash
// half-way is repaired by the next run:
//
//   - desired: the loaded spec;
//   - applied: the inventory in the cluster backend (each object's last
//     applied spec, its placement and status);
//   - observed: what the object's backend holds right now (slots, holders,
//     next_exec, partitions, jobs).
//
// Desired against applied gives spec changes: create (+), update (~),
// replace (-/+) and delete (-). Applied against observed gives drift: state
// changed outside coordd, such as a deleted slot row or a lost token, which
// is listed apart and repaired.
//
// Holders are never evicted. Deleting or replacing a semaphore that has live
// holders sets the old object's limit to 0 and records it as draining (or
// the new one as replacing, admitting nobody); later runs finish the job once
// the holders have released. Prune only ever touches inventory entries, so
// objects coordd never created are left alone.
//
// Apply takes the apply lock in the cluster backend and plans again inside
// it, so two hosts applying at once serialise instead of interleaving.
package reconcile
