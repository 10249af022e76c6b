// Package web is rota's web UI: static HTML, CSS and JavaScript embedded in the binary,
// with no build step and nothing fetched from elsewhere. The pages read everything through
// the REST API with the visitor's token, as any other client does (docs/ui.md).
//
// The package only serves the files, with the security headers the pages rely on. It must
// import none of rota's own packages: the UI knows the server through its API alone.
package web
