package spec

import (
	"github.com/coordd/coordd/internal/pgdsn"

	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
)

// hashBackend adds the redacted connection strings to a backend, so that
// pointing a backend at another host changes the hash but a password
// rotation does not, and no secret is ever hashed into a stored record.
type hashBackend struct {
	Backend
	DSN string `json:"dsn,omitempty"`
	URL string `json:"url,omitempty"`
}

// Hash is the sha256 (hex) of a canonical JSON form of the normalized spec:
// objects and backends, without positions, file names or passwords. It is
// stable across map order, file layout and formatting, so apply records can
// tell whether two hosts applied the same spec.
func (s *Spec) Hash() string {
	bs := make(map[string]hashBackend, len(s.Backends))
	for n, b := range s.Backends {
		dsn := RedactDSN(b.DSN)
		if b.Type == TypePostgres {
			dsn = pgdsn.Redact(b.DSN)
		}
		bs[n] = hashBackend{Backend: *b, DSN: dsn, URL: RedactURL(b.URL)}
	}
	doc := struct {
		Backends   map[string]hashBackend `json:"backends"`
		Cluster    Cluster                `json:"cluster"`
		Semaphores map[string]*Semaphore  `json:"semaphores"`
		Cron       map[string]*CronTask   `json:"cron"`
		Queues     map[string]*Queue      `json:"queues"`
		// omitempty: a spec without rate limits hashes as it did before
		// the kind existed.
		RateLimits map[string]*RateLimit `json:"rate_limits,omitempty"`
	}{bs, s.Cluster, s.Semaphores, s.Cron, s.Queues, s.RateLimits}
	// encoding/json sorts map keys, which makes the encoding canonical.
	raw, err := json.Marshal(doc)
	if err != nil {
		// Only plain data is marshalled; this cannot happen.
		panic("spec: hash: " + err.Error())
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// ObjectCount is the number of managed objects of all kinds.
func (s *Spec) ObjectCount() int {
	return len(s.Semaphores) + len(s.Cron) + len(s.Queues) + len(s.RateLimits)
}

// Addresses lists every managed object, kinds in Kinds order, then by name,
// which is the order plans print them in.
func (s *Spec) Addresses() []Address {
	out := make([]Address, 0, s.ObjectCount())
	for _, k := range Kinds {
		start := len(out)
		switch k {
		case KindSemaphore:
			for n := range s.Semaphores {
				out = append(out, Address{k, n})
			}
		case KindCron:
			for n := range s.Cron {
				out = append(out, Address{k, n})
			}
		case KindQueue:
			for n := range s.Queues {
				out = append(out, Address{k, n})
			}
		case KindRateLimit:
			for n := range s.RateLimits {
				out = append(out, Address{k, n})
			}
		}
		part := out[start:]
		sort.Slice(part, func(i, j int) bool { return part[i].Name < part[j].Name })
	}
	return out
}

// BackendOf returns the resolved backend of an object, or nil when the
// object is absent.
func (s *Spec) BackendOf(a Address) *Backend {
	var name string
	switch a.Kind {
	case KindSemaphore:
		if o := s.Semaphores[a.Name]; o != nil {
			name = o.Backend
		}
	case KindCron:
		if o := s.Cron[a.Name]; o != nil {
			name = o.Backend
		}
	case KindQueue:
		if o := s.Queues[a.Name]; o != nil {
			name = o.Backend
		}
	case KindRateLimit:
		if o := s.RateLimits[a.Name]; o != nil {
			name = o.Backend
		}
	}
	if name == "" {
		return nil
	}
	return s.Backends[name]
}
