package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

// A page of another site can read the dashboard through DNS rebinding:
// its name, once the browser loaded it, is made to resolve to the
// dashboard's address, and the browser then takes the dashboard's pages
// for the other site's own. Such a request still names the other site in
// its Host header, so the dashboard answers only to names it knows: an IP
// address (a request by address cannot come from a rebound name),
// localhost, and the names of Options.Hosts (the listen address's name
// among them). Any other Host gets 421 Misdirected Request. The port is
// not checked: a rebound name is refused whatever its port, and a reverse
// proxy may serve the dashboard on another one.

// hostNameRE is what a name of Options.Hosts may be: a DNS name.
var hostNameRE = regexp.MustCompile(`^(?i)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$`)

// hostSet is the names a dashboard answers to besides IP addresses and
// localhost: lower case, without a final dot.
type hostSet map[string]bool

func newHostSet(names []string) (hostSet, error) {
	hs := hostSet{"localhost": true}
	for _, n := range names {
		if _, err := netip.ParseAddr(strings.Trim(n, "[]")); err == nil {
			continue // any IP address is taken
		}
		if len(n) > 253 || !hostNameRE.MatchString(n) {
			return nil, fmt.Errorf("dashboard host %q is not a host name (give a name or an IP address, without a port)", n)
		}
		hs[strings.TrimSuffix(strings.ToLower(n), ".")] = true
	}
	return hs, nil
}

// allows reports whether the Host header h names this dashboard. An empty
// one (HTTP/1.0) is allowed: a browser always sends one.
func (hs hostSet) allows(h string) bool {
	if h == "" {
		return true
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return hs[strings.TrimSuffix(strings.ToLower(h), ".")]
}

// misdirected answers a request whose Host the dashboard does not answer
// to.
func (d *Dashboard) misdirected(w http.ResponseWriter, r *http.Request) {
	d.log.Debug("dashboard request refused: unknown Host", "host", short(r.Host, 200), "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprintf(w, "This dashboard does not answer to the host %s: use its IP address or localhost, or add the name with coordd run --dashboard-host NAME.\n", short(r.Host, 200))
}
