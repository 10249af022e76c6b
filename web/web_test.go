package web

import (
	"io/fs"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"testing"
)

func TestHandler(t *testing.T) {
	for _, c := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/ui/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/ui/app.css", 200, "text/css; charset=utf-8"},
		{"GET", "/ui/favicon.svg", 200, "image/svg+xml"},
		{"GET", "/ui/index.html", 200, "text/html; charset=utf-8"},
		{"GET", "/ui/missing.js", 404, ""},
		{"GET", "/ui/", 404, ""},
		{"GET", "/ui/a/b.js", 404, ""},
		{"GET", "/ui/.secret", 404, ""},
		{"GET", "/other", 404, ""},
	} {
		w := httptest.NewRecorder()
		Handler().ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
		if w.Code != c.status {
			t.Errorf("%s %s: %d; want %d", c.method, c.path, w.Code, c.status)
			continue
		}
		if got := w.Header().Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("%s %s: Content-Security-Policy %q", c.method, c.path, got)
		}
		if got := w.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s: X-Content-Type-Options %q", c.method, c.path, got)
		}
		if c.status == 200 && w.Header().Get("Content-Type") != c.ctype {
			t.Errorf("%s %s: Content-Type %q; want %q", c.method, c.path, w.Header().Get("Content-Type"), c.ctype)
		}
	}
}

// TestNoInlineCodeOrData keeps the files within the policy and the escaping rule: no
// inline script or style (the policy would refuse them), no innerHTML or similar sinks
// that would turn the API's text into markup, no file of a type the server has no
// Content-Type for.
func TestNoInlineCodeOrData(t *testing.T) {
	inline := regexp.MustCompile(`<script>|<script [^>]*>[^<]|<style|\sstyle=|\son[a-z]+=`)
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function`)
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if _, ok := contentTypes[filepath.Ext(path)]; !ok {
			t.Errorf("%s: no Content-Type for %s files", path, filepath.Ext(path))
		}
		data, err := fs.ReadFile(static, path)
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".html":
			if m := inline.Find(data); m != nil {
				t.Errorf("%s: inline code or style %q; the policy refuses it", path, m)
			}
		case ".js":
			if m := sinks.Find(data); m != nil {
				t.Errorf("%s: %q; put API data in the page with textContent only", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
