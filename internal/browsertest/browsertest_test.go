package browsertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBrowser: the driver loads a page, submits a form as a click would
// (the button's name and value sent, without the page's own JavaScript)
// and takes a screenshot.
func TestBrowser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.Method == http.MethodPost {
			_ = r.ParseForm()
			fmt.Fprintf(w, "<p id=got>%s %s</p>", r.PostForm.Get("who"), r.PostForm.Get("do"))
			return
		}
		fmt.Fprint(w, `<form method=post><input name=who><button name=do value=yes id=go>Go</button></form>`)
	}))
	defer srv.Close()
	p := Start(t).NewPage(t)
	p.Navigate(srv.URL)
	if n := p.Count("#go"); n != 1 {
		t.Fatalf("%d buttons", n)
	}
	p.Fill("input[name=who]", "ann")
	if err := p.Submit("#go"); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(p.Text()); got != "ann yes" {
		t.Fatalf("posted page says %q", got)
	}
	if err := p.Submit("#nothing"); err == nil {
		t.Fatal("submit of a missing button succeeded")
	}
	if png := p.Screenshot(); len(png) < 100 {
		t.Fatalf("screenshot of %d bytes", len(png))
	}
}
