package mysql

import (
	"slices"
	"testing"

	"github.com/coordd/coordd/backends"
)

// TestPushChunks: a batch of pushes is split into statements that each
// check one config and stay within the packet limit, in order; a job
// alone always makes a statement.
func TestPushChunks(t *testing.T) {
	a, b := &claimConfig{text: "a"}, &claimConfig{text: "b"}
	item := func(cc *claimConfig, payload int) *pushItem {
		return &pushItem{cc: cc, job: backends.Job{Payload: make([]byte, payload)}}
	}
	const limit = 64 << 10 // room for 60 KiB of rows, each twice its payload and pushRowBytes
	for _, c := range []struct {
		name  string
		batch []*pushItem
		want  [][2]int
	}{
		{"one", []*pushItem{item(a, 10)}, [][2]int{{0, 1}}},
		{"small", []*pushItem{item(a, 10), item(a, 10), item(a, 10)}, [][2]int{{0, 3}}},
		{"configs", []*pushItem{item(a, 10), item(b, 10), item(b, 10), item(a, 10)}, [][2]int{{0, 1}, {1, 3}, {3, 4}}},
		{"big", []*pushItem{item(a, 20<<10), item(a, 20<<10), item(a, 10), item(a, 40<<10)}, [][2]int{{0, 1}, {1, 3}, {3, 4}}},
		{"over", []*pushItem{item(a, 100<<10), item(a, 10)}, [][2]int{{0, 1}, {1, 2}}},
	} {
		if got := pushChunks(c.batch, limit); !slices.Equal(got, c.want) {
			t.Errorf("%s: chunks %v, want %v", c.name, got, c.want)
		}
	}
}
