package redis

import "time"

// Helpers to read script replies, shared by every area of the store.

// fromMicros is a Redis TIME value in µs as a UTC time.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// toInt reads an integer reply of a script (0 for anything else).
func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

// toString reads a bulk string reply of a script ("" for anything else).
func toString(v any) string {
	s, _ := v.(string)
	return s
}
