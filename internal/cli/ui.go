package cli

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const uiUsage = `rota ui [--no-open]

Opens the web UI logged in as you: asks the server for a one-time link (it works once,
within a minute, and gives the browser a token of yours that lasts 12 hours) and opens it
with xdg-open or open. --no-open, or no such opener, prints the link only. On the local
socket no token is needed; elsewhere the saved login's or --token's is used.`

func runUI(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "ui", uiUsage)
	noOpen := fs.Bool("no-open", false, "print the link without opening a browser")
	if code, ok := cfg.parseNoArgs("ui", fs, g, args); !ok {
		return code
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	link, err := c.UILink(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	full := linkURL(link, c.BaseURL)
	if g.output == "json" {
		link.URL = full
		return cfg.printJSON(link)
	}
	if full == "" {
		// The server was reached on its socket and does not know its own address.
		fmt.Fprintf(cfg.Stderr, "rota ui: the server did not say where browsers reach it; open its address followed by this path (within a minute):\n")
		fmt.Fprintln(cfg.Stdout, link.Path)
		return ExitOK
	}
	fmt.Fprintln(cfg.Stdout, full)
	left := max(0, link.Expires.Sub(cfg.Now()).Round(time.Second))
	if *noOpen {
		fmt.Fprintf(cfg.Stderr, "the link logs in once, within %s\n", left)
		return ExitOK
	}
	if err := openBrowser(full); err != nil {
		fmt.Fprintf(cfg.Stderr, "rota ui: %v; open the link above yourself (it logs in once, within %s)\n", err, left)
	}
	return ExitOK
}

// UILink asks for a one-time link that logs a browser in as the caller.
func (c *Client) UILink(ctx context.Context) (api.UILink, error) {
	var l api.UILink
	err := c.do(ctx, http.MethodPost, "/api/v1/ui/links", nil, nil, &l)
	return l, err
}

// linkURL is the whole link: the server's own when it gave one, else the path on the
// server's http(s) address; empty for a socket server that gave none.
func linkURL(l api.UILink, base string) string {
	if l.URL != "" {
		return l.URL
	}
	if strings.HasPrefix(base, "http://") || strings.HasPrefix(base, "https://") {
		return strings.TrimRight(base, "/") + l.Path
	}
	return ""
}

// openBrowser starts the desktop's opener on url and leaves it running.
func openBrowser(url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("no %s here to open a browser with", name)
	}
	cmd := exec.Command(path, url)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	go cmd.Wait() // reap it; its outcome is the desktop's business
	return nil
}
