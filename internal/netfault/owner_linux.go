//go:build linux

package netfault

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// SocketOwner returns which of pids opened the client end of c, a
// connection accepted from this machine: the process holding the TCP
// socket whose local address is c's remote one. It reads /proc, so a
// proxy can tell the processes behind one address apart while every one
// of them is configured alike.
func SocketOwner(c net.Conn, pids []int) (int, bool) {
	local, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return 0, false
	}
	inode := socketInode(procAddr(local))
	if inode == "" {
		return 0, false
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
				return pid, true
			}
		}
	}
	return 0, false
}

// procAddr writes a as /proc/net/tcp{,6} do: the address as 32-bit words
// in host byte order, in hex, then the port.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", a.Port)
	return b.String()
}

// socketInode finds the inode of the TCP socket whose local address is
// addr (procAddr's form), or "".
func socketInode(addr string) string {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && fs[1] == addr {
				if _, err := strconv.ParseUint(fs[9], 10, 64); err == nil && fs[9] != "0" {
					f.Close()
					return fs[9]
				}
			}
		}
		f.Close()
	}
	return ""
}
