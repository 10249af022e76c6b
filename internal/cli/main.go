package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Exit codes of every verb.
const (
	ExitOK    = 0
	ExitError = 1 // the server refused, failed or could not be reached
	ExitUsage = 2 // bad flags or arguments; nothing was sent
)

// DefaultServer is used when no server is named (--server, $ROTA_SERVER, the saved login)
// and no local server's socket is found.
const DefaultServer = "http://127.0.0.1:7070"

// Config holds what the verbs take from the outside world, so tests can fix it. Stdout,
// Stderr, Now, Getenv and Getwd must be set; Main fills every field from the process.
type Config struct {
	Stdout, Stderr io.Writer
	// Stdin is where `rota login` reads a token not given with --token; nil reads nothing.
	Stdin io.Reader
	// Now is the clock behind every "elapsed", "waited" and "ago".
	Now func() time.Time
	// Location is the zone times are printed in; nil means time.Local.
	Location *time.Location
	// Getenv reads ROTA_SERVER, ROTA_TOKEN, ROTA_CA_FINGERPRINT, ROTA_DATA_DIR,
	// XDG_CONFIG_HOME and HOME.
	Getenv func(string) string
	// ConfigDir is where `rota login` saves the server, token and CA fingerprint
	// (config.yaml); empty means $XDG_CONFIG_HOME/rota, else $HOME/.config/rota.
	ConfigDir string
	// Getwd gives the default working directory of submitted jobs.
	Getwd func() (string, error)
	// Environ is the submitter's environment, which `rota submit --export` sends (ALL by
	// default); nil sends none.
	Environ func() []string
	// HTTP sends the requests; nil means one built for the server (see NewClient), without
	// an overall timeout, which `logs -f` needs for its long polls.
	HTTP *http.Client
	// Binary is what cmd/rota tells the verbs about the binary they run in.
	Binary Binary

	// onFlagSet, when set, is given every flag set a verb makes: `rota completion` learns
	// the verbs' flags by running each with -h.
	onFlagSet func(*flag.FlagSet)
}

// Binary is what this package cannot learn by itself about the binary it is part of.
type Binary struct {
	// StoreSchema is the store schema version the binary migrates to, for `rota version`
	// (the CLI may not import the store).
	StoreSchema int
	// OtherVerbs are the verbs cmd/rota runs itself (server, agent, up, ...), which
	// `rota completion` offers beside the client verbs.
	OtherVerbs []Verb
	// Store runs `rota admin backup` and `rota admin migrate`, which act on a store
	// directly; nil in a binary without them.
	Store StoreTools
}

// Main runs one client verb with the process's environment and returns its exit code.
// cmd/rota calls it for the verbs Verbs lists; ctx should be cancelled on Ctrl-C.
func Main(ctx context.Context, verb string, args []string, stdout, stderr io.Writer, bin Binary) int {
	return Config{
		Stdout:  stdout,
		Stderr:  stderr,
		Stdin:   os.Stdin,
		Now:     time.Now,
		Getenv:  os.Getenv,
		Getwd:   os.Getwd,
		Environ: os.Environ,
		Binary:  bin,
	}.Run(ctx, verb, args)
}

// Verb names a client verb with its one-line summary, for the top-level usage.
type Verb struct {
	Name, Summary string
}

type verbFunc func(ctx context.Context, cfg Config, args []string) int

type verbEntry struct {
	Verb
	run verbFunc
}

// verbs is every client verb. It is filled in init because help and completion read it,
// which an initializer referring to them could not do (an initialization cycle).
var verbs []verbEntry

func init() {
	verbs = []verbEntry{
		{Verb{"submit", "submit a job: rota submit --gpus 1 -- python train.py"}, runSubmit},
		{Verb{"run", "run a command interactively on a terminal: rota run --gpus 1 -- bash"}, runRun},
		{Verb{"attach", "connect this terminal to a running interactive job again"}, runAttach},
		{Verb{"queue", "list jobs with their state and why they wait"}, runQueue},
		{Verb{"show", "show one job in full: request, times, usage, attempts, events"}, runShow},
		{Verb{"why", "say why a job has not started, and when it may"}, runWhy},
		{Verb{"cancel", "cancel jobs"}, runCancel},
		{Verb{"hold", "keep jobs from starting until released"}, runHold},
		{Verb{"release", "let held jobs start"}, runRelease},
		{Verb{"logs", "print a job's log; -f follows it"}, runLogs},
		{Verb{"nodes", "list nodes with their GPUs, real use and health; rota nodes NAME shows one"}, runNodes},
		{Verb{"top", "a live view of the pool and the queue, like nvtop for the cluster"}, runTop},
		{Verb{"usage", "GPU-hours, utilisation, waits, failures and cost by team, user, ...; usage report writes a month's pack"}, runUsage},
		{Verb{"accept", "run a suite of small jobs on a pool and report each node's speed: rota accept --pool P"}, runAccept},
		{Verb{"ui", "open the web UI, logged in as you"}, runUI},
		{Verb{"request", "ask for a quota raise, a restricted queue or reserved GPUs: rota request quota|queue|reservation"}, runRequest},
		{Verb{"notify", "your default webhooks for your jobs' events: rota notify set URL"}, runNotify},
		{Verb{"login", "save a server URL and API token: rota login --server URL"}, runLogin},
		{Verb{"logout", "forget the saved API token"}, runLogout},
		{Verb{"whoami", "say who the server takes you for"}, runWhoami},
		{Verb{"admin", "users and tokens, queues, teams, nodes, reservations, the audit trail"}, runAdmin},
		{Verb{"version", "print rota's version, commit, Go version and store schema"}, runVersion},
		{Verb{"completion", "print a shell completion script: rota completion bash|zsh|fish"}, runCompletion},
		{Verb{"help", "the job contract, the spec format and other topics: rota help TOPIC"}, runHelp},
	}
}

// Verbs lists the verbs Main runs, in the order a person meets them.
func Verbs() []Verb {
	out := make([]Verb, len(verbs))
	for i, v := range verbs {
		out[i] = v.Verb
	}
	return out
}

// Run runs one verb with cfg. Under -o json its errors reach cfg.Stderr as JSON (see
// jsonStderr).
func (cfg Config) Run(ctx context.Context, verb string, args []string) int {
	if wantsJSON(args) {
		js := &jsonStderr{out: cfg.Stderr}
		cfg.Stderr = js
		code := cfg.run(ctx, verb, args)
		js.finish(code)
		return code
	}
	return cfg.run(ctx, verb, args)
}

func (cfg Config) run(ctx context.Context, verb string, args []string) int {
	for _, v := range verbs {
		if v.Name == verb {
			return v.run(ctx, cfg, args)
		}
	}
	fmt.Fprintf(cfg.Stderr, "rota: unknown command %q\n", verb)
	return ExitUsage
}

func (cfg Config) location() *time.Location {
	if cfg.Location == nil {
		return time.Local
	}
	return cfg.Location
}

// globalFlags are accepted by every verb.
type globalFlags struct {
	Endpoint
	output string
}

// newFlagSet makes a verb's flag set with the global flags registered. usage is the
// synopsis line printed above the flags.
func newFlagSet(cfg Config, verb, usage string) (*flag.FlagSet, *globalFlags) {
	fs, g := newStoreFlagSet(cfg, verb, usage)
	fs.StringVar(&g.Server, "server", "", "rota server `URL`, or a comma-separated list of a cluster's servers to follow the leader among (default $ROTA_SERVER, else the saved login, else the local socket, else "+DefaultServer+")")
	fs.StringVar(&g.Token, "token", "", "API `token` (default $ROTA_TOKEN, else the saved login's)")
	fs.StringVar(&g.CAFingerprint, "ca-fingerprint", "", "pin an https server's CA, `sha256:HEX` (default $ROTA_CA_FINGERPRINT, else the saved login's)")
	return fs, g
}

// parseFlags parses args, letting flags and positional arguments mix (`rota show 42 -o
// json`) up to a "--". It returns the positional arguments, or an exit code when parsing
// ended the verb: ExitOK for -h, ExitUsage for a bad flag, whose message the flag package
// has already printed.
func parseFlags(fs *flag.FlagSet, g *globalFlags, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, ExitOK, false
			}
			return nil, ExitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args)-len(rest) > 0 && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if !checkOutput(fs, g) {
		return nil, ExitUsage, false
	}
	return pos, 0, true
}

func checkOutput(fs *flag.FlagSet, g *globalFlags) bool {
	if g.output != "table" && g.output != "json" {
		fmt.Fprintf(fs.Output(), "%s: -o: unknown format %q: want table or json\n", fs.Name(), g.output)
		return false
	}
	return true
}

// client builds the API client for the server and credentials the flags, the environment
// and the saved login name (see resolve).
func (cfg Config) client(g *globalFlags) (*Client, error) {
	e, err := cfg.resolve(g.Endpoint)
	if err != nil {
		return nil, err
	}
	c, err := cfg.newClient(e)
	if err == nil && g.output != "json" {
		c.Printable = true // tables and lines: nothing the server relays reaches the terminal raw
		c.Waiting = func(wait time.Duration, reason string) {
			fmt.Fprintf(cfg.Stderr, "rota: %s (asking again in %d s)\n", reason, int64((wait+time.Second-1)/time.Second))
		}
		c.Notice = func(msg string) { fmt.Fprintf(cfg.Stderr, "rota: %s\n", msg) }
	}
	return c, err
}

// newClient is NewClient sending through cfg.HTTP when that is set.
func (cfg Config) newClient(e Endpoint) (*Client, error) {
	c, err := NewClient(e)
	if err != nil {
		return nil, err
	}
	if cfg.HTTP != nil {
		c.HTTP = cfg.HTTP
	}
	return c, nil
}

// fail prints err for a person, or as JSON under -o json, and returns the exit code for it.
func (cfg Config) fail(ctx context.Context, err error) int {
	if js, ok := cfg.Stderr.(*jsonStderr); ok {
		js.print(errorFor(ctx, err), ExitError)
		return ExitError
	}
	var unreachable *UnreachableError
	switch {
	case errors.As(err, &unreachable):
		fmt.Fprintf(cfg.Stderr, "rota: %v (is `rota up` or `rota server` running? set --server or ROTA_SERVER)\n", unreachable)
	case ctx.Err() != nil:
		fmt.Fprintln(cfg.Stderr, "rota: interrupted")
	default:
		fmt.Fprintf(cfg.Stderr, "rota: %v\n", err)
	}
	return ExitError
}

// usageError prints a message about bad arguments and returns ExitUsage.
// parseNoArgs parses the flags of a verb that takes no positional argument.
func (cfg Config) parseNoArgs(verb string, fs *flag.FlagSet, g *globalFlags, args []string) (int, bool) {
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code, false
	}
	if len(pos) > 0 {
		return cfg.usageError(verb, "unexpected argument %q", pos[0]), false
	}
	return 0, true
}

func (cfg Config) usageError(verb, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	if js, ok := cfg.Stderr.(*jsonStderr); ok {
		js.print(api.Error{Code: codeUsage, Message: "rota " + verb + ": " + msg}, ExitUsage)
		return ExitUsage
	}
	fmt.Fprintf(cfg.Stderr, "rota %s: %s\n", verb, msg)
	return ExitUsage
}

// printJSON writes v indented, as every -o json output is.
func (cfg Config) printJSON(v any) int {
	enc := json.NewEncoder(cfg.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(cfg.Stderr, "rota: %v\n", err)
		return ExitError
	}
	return ExitOK
}
