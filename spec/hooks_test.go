package spec

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestWebhookSecretsStayOnTheHost: a webhook's URL path and header values
// (where Slack and PagerDuty put their secrets) are expanded for delivery
// but never written to the stored definition, the plan's summary or the
// spec hash; a change of them still changes the hash.
func TestWebhookSecretsStayOnTheHost(t *testing.T) {
	load := func(path, token string) *Spec {
		t.Helper()
		src := "cron:\n  r:\n    schedule: \"@hourly\"\n    command: \"true\"\n    on_failure:\n      webhook:\n        url: \"https://hooks.example.com/services/" + path + "\"\n        headers: {Authorization: \"Bearer ${TOKEN}\"}\n"
		s, err := LoadFiles(map[string][]byte{"a.yaml": []byte(src)}, LoadOptions{Getenv: func(k string) (string, bool) {
			if k == "TOKEN" {
				return token, true
			}
			return "", false
		}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := load("T0SECRET", "tok-SECRET")
	w := s.Cron["r"].OnFailure.Webhook
	if w.URL != "https://hooks.example.com/services/T0SECRET" || w.Headers["Authorization"] != "Bearer tok-SECRET" {
		t.Fatalf("the webhook to deliver to is %q %v", w.URL, w.Headers)
	}
	def, _ := json.Marshal(s.Cron["r"])
	for what, text := range map[string]string{"definition": string(def), "summary": s.Cron["r"].OnFailure.Summary()} {
		if strings.Contains(text, "SECRET") {
			t.Errorf("the %s holds the secret: %s", what, text)
		}
		if !strings.Contains(text, "hooks.example.com") {
			t.Errorf("the %s does not say where the hook goes: %s", what, text)
		}
	}
	if h := s.Hash(); h == load("T1SECRET", "tok-SECRET").Hash() || h == load("T0SECRET", "tok-OTHER").Hash() {
		t.Error("a new webhook URL or header value left the spec hash unchanged")
	}
}
