package web

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// AssetPrefix is the path the UI's files are served under; the page itself is at /.
const AssetPrefix = "/ui/"

// ContentSecurityPolicy keeps the page to its own files: no inline script or style, no
// other origin, no framing (so no clickjacking of the Cancel button).
const ContentSecurityPolicy = "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the UI: index.html at / and the files of static/ under AssetPrefix,
// with the security headers on every answer. Anything else is 404.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

// contentTypes are the types of the UI's files, fixed here rather than read from the
// system's mime.types, which varies (application/javascript, or nothing at all).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// started stands in for the files' modification time, which embed does not keep, so that
// conditional requests work and a new binary's files are fetched anew.
var started = time.Now()

func serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
	name, ok := assetName(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	data, err := fs.ReadFile(static, "static/"+name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ctype, ok := contentTypes[path.Ext(name)]
	if !ok {
		ctype = "application/octet-stream"
	}
	h.Set("Content-Type", ctype)
	http.ServeContent(w, r, name, started, bytes.NewReader(data))
}

// assetName maps a request path to a file of static/: / is the page, AssetPrefix+NAME a
// file directly in static/ (no directories, no dot files).
func assetName(p string) (string, bool) {
	if p == "/" {
		return "index.html", true
	}
	name, ok := strings.CutPrefix(p, AssetPrefix)
	if !ok || name == "" || strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
		return "", false
	}
	return name, true
}
