package spec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// childEnvSpec references variables in every kind of connection field, one
// with a default and one unset, and in a cron command and env, which are
// not connection fields.
const childEnvSpec = `backends:
  db: {type: mysql, dsn: "coordd:${COORDD_DB_PASSWORD}@tcp(${DB_HOST:-db1}:3306)/coordd", table_prefix: "${PFX:-c_}"}
  r: {type: redis, url: "redis://:${REDIS_PW}@cache1:6379/0", key_prefix: "${RPFX:-r:}"}
  mc: {type: memcached, servers: ["${MC_HOST:-mc1}:11211"]}
  lite: {type: sqlite, path: "${LITE_DIR:-/x}/db.sqlite"}
cluster: {backend: db%s}
cron:
  c: {schedule: "@daily", command: "echo ${NOT_A_BACKEND}", env: {X: "${ALSO_NOT}"}}
`

var childEnvWant = []string{"COORDD_DB_PASSWORD", "DB_HOST", "LITE_DIR", "MC_HOST", "PFX", "REDIS_PW", "RPFX"}

func TestBackendEnvRecorded(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "COORDD_DB_PASSWORD" || k == "REDIS_PW" {
			return "pw", true
		}
		return "", false
	}
	for _, skip := range []bool{false, true} {
		s := mustLoad(t, one(strings.Replace(childEnvSpec, "%s", "", 1)), LoadOptions{Getenv: env, SkipEnv: skip})
		if got := s.BackendEnv(); !reflect.DeepEqual(got, childEnvWant) {
			t.Errorf("skip-env %v: BackendEnv() = %q, want %q", skip, got, childEnvWant)
		}
		if got := s.ChildEnvUnset(); !reflect.DeepEqual(got, childEnvWant) {
			t.Errorf("skip-env %v: ChildEnvUnset() = %q, want %q (scrub is the default)", skip, got, childEnvWant)
		}
		if s.Cluster.InheritEnv {
			t.Errorf("skip-env %v: InheritEnv set by default", skip)
		}
	}

	scrub := mustLoad(t, one(strings.Replace(childEnvSpec, "%s", ", child_env: scrub", 1)), LoadOptions{Getenv: env})
	if got := scrub.ChildEnvUnset(); !reflect.DeepEqual(got, childEnvWant) {
		t.Errorf("child_env scrub: ChildEnvUnset() = %q", got)
	}
	inherit := mustLoad(t, one(strings.Replace(childEnvSpec, "%s", ", child_env: inherit", 1)), LoadOptions{Getenv: env})
	if got := inherit.ChildEnvUnset(); got != nil {
		t.Errorf("child_env inherit: ChildEnvUnset() = %q, want none", got)
	}
	if got := inherit.BackendEnv(); !reflect.DeepEqual(got, childEnvWant) {
		t.Errorf("child_env inherit: BackendEnv() = %q", got)
	}
	if !inherit.Cluster.InheritEnv {
		t.Error("child_env inherit: InheritEnv not set")
	}
	// The opt-out is part of the spec: a reload that changes it must not
	// look like no change. The default leaves the hash as it was.
	if inherit.Hash() == scrub.Hash() {
		t.Error("child_env inherit and scrub hash the same")
	}
	plain := mustLoad(t, one(strings.Replace(childEnvSpec, "%s", "", 1)), LoadOptions{Getenv: env})
	if plain.Hash() != scrub.Hash() {
		t.Error("an explicit child_env: scrub changed the hash")
	}

	// No reference: nothing to remove.
	if got := mustLoad(t, one("semaphores:\n  s: {limit: 1}\n"), LoadOptions{}).ChildEnvUnset(); len(got) != 0 {
		t.Errorf("implicit backend: ChildEnvUnset() = %q", got)
	}
}

func TestChildEnvBadValue(t *testing.T) {
	_, errs := loadStrings(t, one("cluster:\n  child_env: inherits\n"), LoadOptions{})
	if len(errs) != 1 {
		t.Fatalf("got %v, want one error", errs)
	}
	e := errs[0]
	if posString(e.Pos) != "a.yaml:2:14" || e.Address != "cluster.child_env" ||
		!strings.Contains(e.Msg, `must be one of scrub, inherit; got "inherits"`) {
		t.Errorf("got %s %s: %s", posString(e.Pos), e.Address, e.Msg)
	}
	_, errs = loadStrings(t, one("cluster:\n  child_env: true\n"), LoadOptions{})
	if len(errs) != 1 || posString(errs[0].Pos) != "a.yaml:2:14" {
		t.Errorf("child_env: true: got %v", errs)
	}
}

// TestSentinelSecretsKeptOut checks that a Sentinel backend's passwords
// reach the backend, are removed from commands' environment, and are
// neither hashed nor printed.
func TestSentinelSecretsKeptOut(t *testing.T) {
	src := "backends:\n  r:\n    type: redis\n    sentinel:\n      master: \"${MASTER:-mymaster}\"\n      addrs: [\"${S1:-s1}:26379\"]\n      password: \"${REDIS_PW}\"\n      sentinel_password: \"${SENTINEL_PW}\"\ncluster: {backend: r}\n"
	pw := map[string]string{"REDIS_PW": "hunter2", "SENTINEL_PW": "swordfish"}
	env := func(k string) (string, bool) { v, ok := pw[k]; return v, ok }
	s := mustLoad(t, one(src), LoadOptions{Getenv: env})
	sn := s.Backends["r"].Sentinel
	if sn == nil || sn.Master != "mymaster" || !reflect.DeepEqual(sn.Addrs, []string{"s1:26379"}) || sn.Password != "hunter2" || sn.SentinelPassword != "swordfish" {
		t.Fatalf("sentinel = %+v", sn)
	}
	if got, want := s.ChildEnvUnset(), []string{"MASTER", "REDIS_PW", "S1", "SENTINEL_PW"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ChildEnvUnset() = %q, want %q", got, want)
	}
	pw["REDIS_PW"], pw["SENTINEL_PW"] = "rotated", "rotated too"
	if again := mustLoad(t, one(src), LoadOptions{Getenv: env}); again.Hash() != s.Hash() {
		t.Error("a password rotation changed the hash")
	}
	moved := mustLoad(t, one(strings.Replace(src, "${S1:-s1}", "s9", 1)), LoadOptions{Getenv: env})
	if moved.Hash() == s.Hash() {
		t.Error("other Sentinels hash the same")
	}
	raw, err := json.Marshal(s.Backends["r"])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "hunter2") || strings.Contains(string(raw), "swordfish") {
		t.Errorf("a password in the backend's JSON: %s", raw)
	}
	_, errs := loadStrings(t, one(strings.Replace(src, "\"${REDIS_PW}\"", "12345", 1)), LoadOptions{Getenv: env})
	if len(errs) != 1 || strings.Contains(errs[0].Error(), "12345") {
		t.Errorf("a password that is not a string: %v (the value must not be shown)", errs)
	}
}
