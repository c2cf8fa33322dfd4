package child

// The variables coordd sets for the commands it starts. docs/spec.md ("The
// environment of commands") lists which command gets which, and their
// formats; a test in cmd/coordd checks the commands against that table.
const (
	// Cron commands (the daemon's runs and `cron run`).
	VarTask        = "COORDD_TASK"
	VarScheduledAt = "COORDD_SCHEDULED_AT"
	VarRunID       = "COORDD_RUN_ID"
	// VarTaskFencingToken is the task's own fencing number; a task without
	// a semaphore also gives it as VarFencingToken.
	VarTaskFencingToken = "COORDD_TASK_FENCING_TOKEN"

	// `sem run`, and cron commands of a task with a semaphore.
	VarSemaphore    = "COORDD_SEMAPHORE"
	VarSlot         = "COORDD_SLOT"
	VarFencingToken = "COORDD_FENCING_TOKEN"
	// VarSemaphoreKey is the instance's key, for `sem run --key` of a keyed
	// semaphore.
	VarSemaphoreKey = "COORDD_SEMAPHORE_KEY"

	// `queue work`; VarAttempt is a cron command's too.
	VarQueue   = "COORDD_QUEUE"
	VarJobID   = "COORDD_JOB_ID"
	VarAttempt = "COORDD_ATTEMPT"

	// `rate run`: the rate limit that granted the permit, and its key.
	VarRateLimit    = "COORDD_RATE_LIMIT"
	VarRateLimitKey = "COORDD_RATE_LIMIT_KEY"
)

// Vars lists the variables above. Start drops them from the environment a
// command would inherit from coordd, so that a command sees only those its
// own starter set: a `cron run` started by a `sem run` command must not pass
// that slot's COORDD_SEMAPHORE and COORDD_SLOT on next to the task's
// numbers, where a resource would pair them wrongly.
var Vars = []string{
	VarTask, VarScheduledAt, VarRunID, VarTaskFencingToken,
	VarSemaphore, VarSlot, VarFencingToken, VarSemaphoreKey,
	VarQueue, VarJobID, VarAttempt,
	VarRateLimit, VarRateLimitKey,
}
