package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

const loginUsage = `rota login --server URL [--token TOKEN] [--ca-fingerprint sha256:HEX]

Checks an API token with the server and saves the server's URL, the token and the CA
fingerprint in config.yaml in $XDG_CONFIG_HOME/rota (else ~/.config/rota), readable by
you alone. Every verb then uses them unless --server, --token, $ROTA_SERVER or
$ROTA_TOKEN say otherwise; the saved token is sent to the saved server only. Without
--token the token is read from standard input, one line, which keeps it out of your
shell's history. An https server is recognised by its CA's fingerprint, which whoever
runs the cluster can tell you; without one the system's roots are trusted. -o json
prints the api.Whoami the server answered.`

const logoutUsage = `rota logout

Forgets the saved API token; the saved server stays. The token stays valid on the server
until it expires or is revoked (rota admin token revoke ID).`

const whoamiUsage = `rota whoami

Says who the server takes you for: user, role, teams, and how you proved it. -o json
prints an api.Whoami.`

// savedLogin is config.yaml: what `rota login` saves.
type savedLogin struct {
	Server        string `yaml:"server"`
	Token         string `yaml:"token,omitempty"`
	CAFingerprint string `yaml:"ca_fingerprint,omitempty"`
}

// NewClientFromEnv builds the Client a client verb would: the empty fields of e are taken
// from the process's environment and the saved login as resolve describes.
func NewClientFromEnv(e Endpoint) (*Client, error) {
	return Config{Getenv: os.Getenv}.client(&globalFlags{Endpoint: e})
}

// resolve fills the empty fields of e. The server comes from $ROTA_SERVER, else the saved
// login, else the socket of a server on this machine (<data dir>/rota.sock), else
// DefaultServer; the token and the CA fingerprint from $ROTA_TOKEN and
// $ROTA_CA_FINGERPRINT, else the saved login. The saved token and fingerprint belong to
// the saved server and go with no other, so that `--server` pointed elsewhere never
// hands a token to a server it was not meant for.
func (cfg Config) resolve(e Endpoint) (Endpoint, error) {
	saved, err := cfg.loadLogin()
	if err != nil {
		return e, err
	}
	for _, s := range []string{e.Server, cfg.Getenv("ROTA_SERVER"), saved.Server, cfg.localSocket(), DefaultServer} {
		if s != "" {
			e.Server = s
			break
		}
	}
	if e.Server, err = normalizeServer(e.Server); err != nil {
		return e, err
	}
	savedServer, _ := normalizeServer(saved.Server)
	forSaved := saved.Server != "" && savedServer == e.Server
	if e.Token == "" {
		e.Token = cfg.Getenv("ROTA_TOKEN")
	}
	if e.Token == "" && forSaved {
		e.Token = saved.Token
	}
	if e.CAFingerprint == "" {
		e.CAFingerprint = cfg.Getenv("ROTA_CA_FINGERPRINT")
	}
	if e.CAFingerprint == "" && forSaved {
		e.CAFingerprint = saved.CAFingerprint
	}
	return e, nil
}

// localSocket is the URL of the socket `rota up` serves in its data directory
// ($ROTA_DATA_DIR, else ~/.rota), or "" when there is none.
func (cfg Config) localSocket() string {
	dir := cfg.Getenv("ROTA_DATA_DIR")
	if dir == "" {
		home := cfg.Getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".rota")
	}
	path, err := filepath.Abs(filepath.Join(dir, "rota.sock"))
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return ""
	}
	return "unix://" + path
}

// loginPath is where the saved login lives, "" when no directory can be told.
func (cfg Config) loginPath() string {
	dir := cfg.ConfigDir
	if dir == "" {
		if x := cfg.Getenv("XDG_CONFIG_HOME"); x != "" {
			dir = filepath.Join(x, "rota")
		} else if home := cfg.Getenv("HOME"); home != "" {
			dir = filepath.Join(home, ".config", "rota")
		} else {
			return ""
		}
	}
	return filepath.Join(dir, "config.yaml")
}

// loadLogin reads the saved login; without one it returns the zero value.
func (cfg Config) loadLogin() (savedLogin, error) {
	var l savedLogin
	path := cfg.loginPath()
	if path == "" {
		return l, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, err
	}
	if err := yaml.Unmarshal(data, &l); err != nil {
		return l, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// saveLogin writes the login readable by its owner alone, replacing the file whole so that
// a crash leaves the old one or the new one.
func (cfg Config) saveLogin(l savedLogin) error {
	path := cfg.loginPath()
	if path == "" {
		return errors.New("cannot tell where to save the login: set $HOME or $XDG_CONFIG_HOME")
	}
	data, err := yaml.Marshal(l)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".config-*.yaml") // created 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func runLogin(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "login", loginUsage)
	if code, ok := cfg.parseNoArgs("login", fs, g, args); !ok {
		return code
	}
	saved, err := cfg.loadLogin()
	if err != nil {
		return cfg.fail(ctx, err)
	}
	e := g.Endpoint
	if e.Server == "" {
		e.Server = cfg.Getenv("ROTA_SERVER")
	}
	if e.Server == "" {
		return cfg.usageError("login", "--server URL is required, e.g. --server https://rota.example.com:7443")
	}
	if e.Server, err = normalizeServer(e.Server); err != nil {
		return cfg.usageError("login", "%v", err)
	}
	if strings.HasPrefix(e.Server, "unix://") {
		return cfg.usageError("login", "a server's Unix socket knows you by your Unix account; no login is needed")
	}
	if e.Token == "" {
		if e.Token, err = readToken(cfg); err != nil {
			return cfg.usageError("login", "%v", err)
		}
	}
	if e.CAFingerprint == "" {
		e.CAFingerprint = cfg.Getenv("ROTA_CA_FINGERPRINT")
	}
	if savedServer, _ := normalizeServer(saved.Server); e.CAFingerprint == "" && savedServer == e.Server {
		e.CAFingerprint = saved.CAFingerprint
	}

	c, err := cfg.newClient(e)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	who, err := c.Whoami(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if err := cfg.saveLogin(savedLogin{Server: e.Server, Token: e.Token, CAFingerprint: e.CAFingerprint}); err != nil {
		return cfg.fail(ctx, fmt.Errorf("saving the login: %w", err))
	}
	if g.output == "json" {
		return cfg.printJSON(who)
	}
	fmt.Fprintf(cfg.Stdout, "Logged in to %s as %s (%s)\n", e.Server, who.User, who.Role)
	return ExitOK
}

// readToken reads one line from standard input, prompting when that is a terminal.
func readToken(cfg Config) (string, error) {
	const want = "give --token TOKEN, or the token on standard input"
	if cfg.Stdin == nil {
		return "", errors.New("no token: " + want)
	}
	if f, ok := cfg.Stdin.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&fs.ModeCharDevice != 0 {
			fmt.Fprint(cfg.Stderr, "API token: ")
		}
	}
	line, err := bufio.NewReader(cfg.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(line)
	if token == "" {
		return "", errors.New("no token on standard input: " + want)
	}
	return token, nil
}

func runLogout(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "logout", logoutUsage)
	if code, ok := cfg.parseNoArgs("logout", fs, g, args); !ok {
		return code
	}
	saved, err := cfg.loadLogin()
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if saved.Token == "" {
		fmt.Fprintln(cfg.Stdout, "No token is saved")
		return ExitOK
	}
	saved.Token = ""
	if err := cfg.saveLogin(saved); err != nil {
		return cfg.fail(ctx, fmt.Errorf("saving the login: %w", err))
	}
	fmt.Fprintf(cfg.Stdout, "Logged out of %s: the saved token is forgotten\n", saved.Server)
	return ExitOK
}

func runWhoami(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "whoami", whoamiUsage)
	if code, ok := cfg.parseNoArgs("whoami", fs, g, args); !ok {
		return code
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	who, err := c.Whoami(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(who)
	}
	tw := newTable(cfg.Stdout)
	for _, kv := range [][2]string{
		{"User", who.User},
		{"Role", who.Role},
		{"Teams", joinOrDash(who.Teams)},
		{"Via", describeAuthKind(who)},
		{"Server", c.BaseURL},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// describeAuthKind says how the caller proved who it is.
func describeAuthKind(w api.Whoami) string {
	switch w.Kind {
	case auth.KindToken:
		return "API token " + orDash(w.TokenID)
	case auth.KindUnix:
		return "Unix account, through the server's local socket"
	case auth.KindNode:
		return "node certificate of " + orDash(w.Node)
	case auth.KindLocal:
		return "the server itself"
	}
	return orDash(w.Kind)
}
