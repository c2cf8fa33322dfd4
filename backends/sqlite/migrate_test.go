package sqlite

import "testing"

func TestEmbeddedMigrations(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "init" || ms[0].MinBinary != "0.1.0" {
		t.Fatalf("migrations = %+v", ms)
	}
}
