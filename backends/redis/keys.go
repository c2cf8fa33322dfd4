package redis

import (
	"encoding/hex"
	"regexp"
)

// keys builds every key the store uses; nothing else in the package
// concatenates key text. An object's keys share a hash tag, {kind:name},
// so that a Redis Cluster would keep them in one slot and one script may
// touch them all. Keys that span objects (the cron schedule, the leader
// lease, the inventory) have their own tags and are never used in one
// script with an object's keys, except through KEYS that share a tag.
//
// Names are data: a name made only of the characters the spec allows
// appears as it is, so that keys are readable in redis-cli; any other name
// (the Go API accepts any string) appears as '=' and its bytes in hex, so
// no name can produce key syntax ({, }, :, *) or collide with another (a
// spec name never starts with '=').
type keys struct{ prefix string }

// plainName matches names written into keys as they are.
var plainName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// encodeName is a name as it appears inside a key.
func encodeName(name string) string {
	if plainName.MatchString(name) {
		return name
	}
	return "=" + hex.EncodeToString([]byte(name))
}

// object is the key part of one object of a kind, with its hash tag.
func (k keys) object(kind, name, part string) string {
	return k.prefix + "{" + kind + ":" + encodeName(name) + "}:" + part
}

// global is a key that belongs to no single object.
func (k keys) global(part string) string {
	return k.prefix + "{global}:" + part
}
