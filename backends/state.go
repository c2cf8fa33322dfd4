package backends

import (
	"encoding/json"
	"time"

	"github.com/coordd/coordd/spec"
)

// Entry statuses in the inventory.
const (
	// StatusActive: the object is applied as its Spec says.
	StatusActive = "active"
	// StatusDraining: the object was removed from the spec, but holders or
	// running occurrences remain; it admits nobody and is deleted once drained.
	StatusDraining = "draining"
	// StatusReplacing: the object moved to another backend or mode; the new
	// object admits nobody until Previous drains.
	StatusReplacing = "replacing"
)

// Placement is where an applied object lives.
type Placement struct {
	Backend     string          `json:"backend"`
	BackendType string          `json:"backend_type"`
	Spec        json.RawMessage `json:"spec"`
}

// InventoryEntry is one managed object as last applied.
type InventoryEntry struct {
	Address spec.Address `json:"address"`
	Placement
	Status string `json:"status"`
	// Previous is the placement being drained while Status is
	// StatusReplacing.
	Previous *Placement `json:"previous,omitempty"`
	// Generation is the apply generation that last wrote the entry.
	Generation int64 `json:"generation"`
}

// ApplyRecord records one apply.
type ApplyRecord struct {
	Generation int64     `json:"generation"`
	SpecHash   string    `json:"spec_hash"`
	Host       string    `json:"host"`
	At         time.Time `json:"at"`
	Summary    string    `json:"summary"`
}

// State is the applied state kept in the cluster backend.
type State struct {
	Entries []InventoryEntry
	// Last is nil before the first apply.
	Last *ApplyRecord
}
