package memcached

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/crc32"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/bradfitz/gomemcache/memcache"
)

// keys builds every key the store uses; nothing else in the package
// concatenates key text. A key is prefix + "{" + tag + "}" + part. The tag
// names the object (sem:<name>) or a server (srv:<addr>); the selector sends
// every key of one tag to one server, so that one semaphore's keys, and the
// clock its expiries are computed with, live on one memcached.
//
// Keys of one semaphore (tag sem:<name>):
//
//	cfg      the config: JSON of backends.SemaphoreConfig plus span, no expiry
//	fencing  the fencing counter (decimal, incr), no expiry
//	slot:<i> slot i while held, mode lease: the holder record, expiring at
//	         the lease's end (absolute server time)
//	ctr      mode counter: the counter mutex (incr/decr), expiring with the
//	         holder's lease
//	hold     mode counter: the holder record (bookkeeping, not the gate)
//
// Names are data: a name made only of the characters the spec allows
// appears as it is; any other name appears as '=' and its bytes in hex, and
// a long one as '#' and its SHA-256, so that no name produces key syntax
// (memcached keys may not hold spaces or control characters and are at most
// 250 bytes) or collides with another.
type keys struct{ prefix string }

// plainName matches names written into keys as they are.
var plainName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// maxEncodedName keeps keys below memcached's 250 bytes with any sane prefix.
const maxEncodedName = 120

// encodeName is a name as it appears inside a key.
func encodeName(name string) string {
	if len(name) <= maxEncodedName && plainName.MatchString(name) {
		return name
	}
	if e := "=" + hex.EncodeToString([]byte(name)); len(e) <= maxEncodedName {
		return e
	}
	sum := sha256.Sum256([]byte(name))
	return "#" + hex.EncodeToString(sum[:])
}

func (k keys) tagged(tag, part string) string { return k.prefix + "{" + tag + "}" + part }

// semTag is the tag of semaphore name.
func semTag(name string) string { return "sem:" + encodeName(name) }

func (k keys) semCfg(name string) string     { return k.tagged(semTag(name), "cfg") }
func (k keys) semFencing(name string) string { return k.tagged(semTag(name), "fencing") }
func (k keys) semCtr(name string) string     { return k.tagged(semTag(name), "ctr") }
func (k keys) semHold(name string) string    { return k.tagged(semTag(name), "hold") }
func (k keys) semSlot(name string, i int) string {
	return k.tagged(semTag(name), "slot:"+strconv.Itoa(i))
}

// marker is the data-loss marker of the server at addr (marker.go).
func (k keys) marker(addr string) string { return k.tagged("srv:"+addr, "marker") }

// selector picks a server by a key's tag: keys tagged srv:<addr> go to that
// server, every other tag to crc32(tag) mod the number of servers.
type selector struct {
	prefixLen int
	addrs     []net.Addr
	byName    map[string]net.Addr // never modified after newSelector
}

func newSelector(prefix string, servers []string) (*selector, error) {
	s := &selector{prefixLen: len(prefix), byName: map[string]net.Addr{}}
	var ss memcache.ServerList
	if err := ss.SetServers(servers...); err != nil {
		return nil, err
	}
	if err := ss.Each(func(a net.Addr) error {
		s.addrs = append(s.addrs, a)
		s.byName[a.String()] = a
		return nil
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// tag returns the tag of key ("" when it has none).
func (s *selector) tag(key string) string {
	if len(key) <= s.prefixLen || key[s.prefixLen] != '{' {
		return ""
	}
	rest := key[s.prefixLen+1:]
	if i := strings.IndexByte(rest, '}'); i >= 0 {
		return rest[:i]
	}
	return ""
}

// PickServer implements memcache.ServerSelector.
func (s *selector) PickServer(key string) (net.Addr, error) {
	return s.pickTag(s.tag(key)), nil
}

// pickTag is the server that holds the keys of tag.
func (s *selector) pickTag(tag string) net.Addr {
	if a, ok := strings.CutPrefix(tag, "srv:"); ok {
		if addr, ok := s.byName[a]; ok {
			return addr
		}
	}
	if len(s.addrs) == 1 {
		return s.addrs[0]
	}
	return s.addrs[crc32.ChecksumIEEE([]byte(tag))%uint32(len(s.addrs))]
}

// Each implements memcache.ServerSelector.
func (s *selector) Each(f func(net.Addr) error) error {
	for _, a := range s.addrs {
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}
