package backends

import "hash/fnv"

// KeyPartition is the partition of a job's key among partitions (fewer
// than 1 count as 1): FNV-1a 32 of the key's bytes modulo the count. Every
// backend uses this one function, so a key maps to the same partition in
// every process, version and store; stored jobs keep their partition, so
// the mapping must never change.
func KeyPartition(key string, partitions int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(max(partitions, 1)))
}
