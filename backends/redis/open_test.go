package redis_test

import (
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/redis"
)

// TestOpenErrorHidesThePassword: Open is public Go API, reached without
// the spec loader's checks; a URL that does not parse (a password holding
// "/") once came back in url.Parse's error, password and all.
func TestOpenErrorHidesThePassword(t *testing.T) {
	for url, secrets := range map[string][]string{
		"redis://u:q7Zr/abcdefSECRET@127.0.0.1:6379/0": {"q7Zr", "abcdefSECRET"},
		"redis://u:Zq9%zzQsecret@127.0.0.1:6379/0":     {"Zq9", "zzQsecret"},
	} {
		s, err := redis.Open(t.Context(), "r", url, "p:", backends.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", url)
			continue
		}
		for _, secret := range secrets {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows %q: %v", secret, err)
			}
		}
		if !strings.Contains(err.Error(), "parse url") {
			t.Errorf("the error %q does not say the url does not parse", err)
		}
	}
}
