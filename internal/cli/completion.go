package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

const completionUsage = `rota completion bash|zsh|fish

Prints a script that completes rota's verbs, their sub-verbs and the flags of the verb
being typed. Load it with, for example:
  bash:  source <(rota completion bash)       (or save it in ~/.local/share/bash-completion/completions/rota)
  zsh:   rota completion zsh > "${fpath[1]}/_rota"   (or: source <(rota completion zsh))
  fish:  rota completion fish > ~/.config/fish/completions/rota.fish
The verbs cmd/rota runs itself (server, agent, up, sim, ...) complete by name only.`

// subVerbs are the second words of the client verbs that take one, besides admin's,
// which come from its table.
var subVerbs = map[string][]string{
	"notify":  {"set", "list", "clear"},
	"request": {"quota", "queue", "reservation", "list"},
	"usage":   {"report"},
}

// command is one word path a person can type (submit, admin, admin user, admin user add)
// with what may follow it.
type command struct {
	path  string
	subs  []string
	flags []string // with their dashes, as the flags' usage shows them
}

func runCompletion(ctx context.Context, cfg Config, args []string) int {
	const cmd = "completion"
	fs, g := newFlagSet(cfg, cmd, completionUsage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError(cmd, "want one shell: bash, zsh or fish")
	}
	write, ok := completionWriters[pos[0]]
	if !ok {
		return cfg.usageError(cmd, "unknown shell %q: want bash, zsh or fish", pos[0])
	}
	write(cfg.Stdout, commandTree(ctx, cfg.Binary.OtherVerbs))
	return ExitOK
}

var completionWriters = map[string]func(io.Writer, []command){
	"bash": writeBash,
	"zsh":  writeZsh,
	"fish": writeFish,
}

// commandTree lists every word path with its sub-verbs and flags, the top level ("")
// first. The flags are learnt by running each verb with -h in a Config that reaches
// nothing, catching the flag sets it makes: so they cannot drift from the verbs.
func commandTree(ctx context.Context, others []Verb) []command {
	top := command{}
	var cmds []command
	for _, v := range verbs {
		top.subs = append(top.subs, v.Name)
		switch {
		case v.Name == "admin":
			cmds = append(cmds, adminTree(ctx)...)
		case subVerbs[v.Name] != nil:
			c := command{path: v.Name, subs: subVerbs[v.Name], flags: flagsOf(ctx, v.Name)}
			cmds = append(cmds, c)
			for _, s := range c.subs {
				cmds = append(cmds, command{path: v.Name + " " + s, flags: flagsOf(ctx, v.Name, s)})
			}
		default:
			c := command{path: v.Name, flags: flagsOf(ctx, v.Name)}
			if v.Name == "completion" {
				c.subs = sortedKeys(completionWriters)
			}
			cmds = append(cmds, c)
		}
	}
	for _, v := range others {
		top.subs = append(top.subs, v.Name)
	}
	return append([]command{top}, cmds...)
}

// adminTree is admin and its one- and two-word commands. A first word can be both a
// command and a group (join-token, join-token list).
func adminTree(ctx context.Context) []command {
	var order []string
	byPath := map[string]*command{}
	get := func(path string) *command {
		if c := byPath[path]; c != nil {
			return c
		}
		order = append(order, path)
		byPath[path] = &command{path: path}
		return byPath[path]
	}
	admin := get("admin")
	for _, ac := range adminCommands {
		words := strings.Fields(ac.name)
		parent := admin
		for i, w := range words {
			if !slices.Contains(parent.subs, w) {
				parent.subs = append(parent.subs, w)
			}
			parent = get("admin " + strings.Join(words[:i+1], " "))
		}
		parent.flags = flagsOf(ctx, "admin", words...)
	}
	out := make([]command, len(order))
	for i, path := range order {
		out[i] = *byPath[path]
	}
	return out
}

// flagsOf runs `rota VERB WORDS... -h` where it can reach nothing and returns the flags
// of the flag sets the verb made, as "-o" and "--name".
func flagsOf(ctx context.Context, verb string, words ...string) []string {
	var sets []*flag.FlagSet
	cfg := Config{
		Stdout: io.Discard,
		Stderr: io.Discard,
		Now:    time.Now,
		Getenv: func(string) string { return "" },
		Getwd:  func() (string, error) { return "/", nil },
		// -h ends every verb before it sends anything; should one ever not, it reaches
		// no server.
		HTTP:      &http.Client{Transport: refuseAll{}},
		ConfigDir: "/nonexistent/rota-completion",
		onFlagSet: func(fs *flag.FlagSet) { sets = append(sets, fs) },
	}
	cfg.Run(ctx, verb, append(words, "-h"))
	var names []string
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			name := "--" + f.Name
			if len(f.Name) == 1 {
				name = "-" + f.Name
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		})
	}
	sort.Strings(names)
	return names
}

type refuseAll struct{}

func (refuseAll) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("rota completion sends no requests")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// The three scripts share one shape: walk the words typed so far, extending the command
// path while a word names a sub-verb of it (flags and their values are skipped), then
// offer the path's flags after a "-", else its sub-verbs, else file names.

func writeBash(w io.Writer, cmds []command) {
	fmt.Fprint(w, `# bash completion for rota. Generated by: rota completion bash
_rota() {
    local cur="${COMP_WORDS[COMP_CWORD]}" cmd="" next w i subs="" flags=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        [[ $w == -* ]] && continue
        next="${cmd:+$cmd }$w"
        case "$next" in
`)
	fmt.Fprintf(w, "        %s) cmd=\"$next\" ;;\n", caseList(paths(cmds)))
	fmt.Fprint(w, `        esac
    done
    case "$cmd" in
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "    %s) subs=%s; flags=%s ;;\n", quoteWord(c.path), quoteWord(strings.Join(c.subs, " ")), quoteWord(strings.Join(c.flags, " ")))
	}
	fmt.Fprint(w, `    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ -n $subs ]]; then
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    fi
}
complete -o default -F _rota rota
`)
}

func writeZsh(w io.Writer, cmds []command) {
	// $path is taken in zsh (it is $PATH as an array), so the path is $cmd here too.
	fmt.Fprint(w, `#compdef rota
# zsh completion for rota. Generated by: rota completion zsh
_rota() {
    local cmd="" next w i
    local -a subs flags
    for ((i = 2; i < CURRENT; i++)); do
        w="${words[i]}"
        [[ $w == -* ]] && continue
        next="${cmd:+$cmd }$w"
        case "$next" in
`)
	fmt.Fprintf(w, "        (%s) cmd=\"$next\" ;;\n", caseList(paths(cmds)))
	fmt.Fprint(w, `        esac
    done
    case "$cmd" in
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "    (%s) subs=(%s); flags=(%s) ;;\n", quoteWord(c.path), strings.Join(c.subs, " "), strings.Join(c.flags, " "))
	}
	fmt.Fprint(w, `    esac
    if [[ ${words[CURRENT]} == -* ]]; then
        compadd -- $flags
    elif (( ${#subs} )); then
        compadd -- $subs
    else
        _files
    fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _rota "$@"
else
    compdef _rota rota
fi
`)
}

func writeFish(w io.Writer, cmds []command) {
	fmt.Fprint(w, `# fish completion for rota. Generated by: rota completion fish
function __rota_cmd
    set -l cmd ""
    for w in (commandline -opc)[2..-1]
        string match -q -- '-*' $w; and continue
        set -l next (string trim -- "$cmd $w")
        switch $next
`)
	fmt.Fprintf(w, "            case %s\n                set cmd $next\n", fishList(paths(cmds)))
	fmt.Fprint(w, `        end
    end
    echo $cmd
end

function __rota_words
    set -l subs
    set -l flags
    switch (__rota_cmd)
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "        case %s\n            set subs %s\n            set flags %s\n", quoteWord(c.path), strings.Join(c.subs, " "), fishList(c.flags))
	}
	io.WriteString(w, `    end
    if string match -q -- '-*' (commandline -ct)
        printf '%s\n' $flags
    else
        printf '%s\n' $subs
    end
end

# Files are offered only where no sub-verb is due.
function __rota_wants_files
    test -z "$(__rota_words)"
end

complete -c rota -n 'not __rota_wants_files' -f -a '(__rota_words)'
complete -c rota -n '__rota_wants_files' -a '(__rota_words)'
`)
}

// paths lists the command paths that can be extended: the sub-verbs' full paths.
func paths(cmds []command) []string {
	var out []string
	for _, c := range cmds {
		if c.path != "" {
			out = append(out, c.path)
		}
	}
	return out
}

// caseList is a bash or zsh case pattern matching any of words exactly.
func caseList(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = quoteWord(w)
	}
	return strings.Join(q, "|")
}

func fishList(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = quoteWord(w)
	}
	return strings.Join(q, " ")
}

// quoteWord quotes a word in single quotes for bash, zsh and fish alike: verb and flag
// names hold no quote, so there is nothing to escape.
func quoteWord(s string) string { return "'" + s + "'" }
