package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errOut strings.Builder
	cfg := Config{
		Stdout: &out,
		Stderr: &errOut,
		Getenv: func(string) string { return "" },
		Binary: Binary{OtherVerbs: []Verb{{Name: "up"}}},
	}
	code := cfg.Run(context.Background(), "completion", []string{shell})
	if code != ExitOK || out.Len() == 0 {
		t.Fatalf("rota completion %s: exit %d, stderr %q, %d bytes out", shell, code, errOut.String(), out.Len())
	}
	return out.String()
}

// hasWord reports whether word stands in s between non-word characters.
func hasWord(s, word string) bool {
	return regexp.MustCompile(`(^|[^-\w])` + regexp.QuoteMeta(word) + `($|[^-\w])`).MatchString(s)
}

// TestCompletionScripts checks that each script names every verb, sub-verb and flag, and
// that the shells installed here accept its syntax.
func TestCompletionScripts(t *testing.T) {
	cmds := commandTree(context.Background(), []Verb{{Name: "up"}})
	for _, shell := range sortedKeys(completionWriters) {
		t.Run(shell, func(t *testing.T) {
			script := completionScript(t, shell)
			for _, v := range append(Verbs(), Verb{Name: "up"}) {
				if !hasWord(script, v.Name) {
					t.Errorf("the script lacks the verb %s", v.Name)
				}
			}
			for _, c := range cmds {
				for _, w := range append(slices.Clone(c.subs), c.flags...) {
					if !hasWord(script, w) {
						t.Errorf("the script lacks %s of %q", w, c.path)
					}
				}
			}
			bin, err := exec.LookPath(shell)
			if err != nil {
				t.Logf("%s is not installed: its syntax is not checked", shell)
				return
			}
			path := filepath.Join(t.TempDir(), "rota."+shell)
			if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			check := []string{"-n", path}
			if shell == "fish" {
				check = []string{"--no-execute", path}
			}
			if out, err := exec.Command(bin, check...).CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s", bin, strings.Join(check, " "), err, out)
			}
		})
	}
	if code, _, _ := (testRun{}).run(t, "completion", "tcsh"); code != ExitUsage {
		t.Errorf("rota completion tcsh: exit %d, want %d", code, ExitUsage)
	}
}

// TestCompletionTree checks what the scripts are made from: the flags come from the verbs'
// own flag sets, and admin's commands nest under their first word.
func TestCompletionTree(t *testing.T) {
	byPath := map[string]command{}
	for _, c := range commandTree(context.Background(), nil) {
		if _, dup := byPath[c.path]; dup {
			t.Errorf("path %q listed twice", c.path)
		}
		byPath[c.path] = c
	}
	for path, want := range map[string][]string{
		"submit":           {"--gpus", "--time", "-o", "--server"},
		"queue":            {"-o"},
		"notify set":       {"--events"},
		"admin join-token": {"--ttl"},
		"admin queue set":  {"-o"},
	} {
		for _, f := range want {
			if !slices.Contains(byPath[path].flags, f) {
				t.Errorf("%q: flags %v lack %s", path, byPath[path].flags, f)
			}
		}
	}
	for path, want := range map[string][]string{
		"":                 {"submit", "admin", "version", "completion", "help"},
		"admin":            {"user", "queue", "audit", "join-token"},
		"admin user":       {"list", "add", "remove"},
		"admin join-token": {"list", "revoke"},
		"notify":           {"set", "list", "clear"},
		"completion":       {"bash", "zsh", "fish"},
	} {
		for _, s := range want {
			if !slices.Contains(byPath[path].subs, s) {
				t.Errorf("%q: sub-verbs %v lack %s", path, byPath[path].subs, s)
			}
		}
	}
	// Every verb and admin command takes -h; one that printed no flag set is a verb the
	// completion could not read.
	for path, c := range byPath {
		if path != "" && path != "admin" && path != "help" && len(c.subs) == 0 && len(c.flags) == 0 {
			t.Errorf("%q: no flags learnt", path)
		}
	}
}

// TestCompletionBash runs the bash completion function on a few command lines.
func TestCompletionBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	path := filepath.Join(t.TempDir(), "rota.bash")
	if err := os.WriteFile(path, []byte(completionScript(t, "bash")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"rota", "sub"}, "submit"},
		{[]string{"rota", "admin", "join-token", ""}, "list revoke"},
		{[]string{"rota", "submit", "--gpus-p"}, "--gpus-per-node"},
		{[]string{"rota", "queue", "-o", "json", "--serv"}, "--server"},
		{[]string{"rota", "completion", "z"}, "zsh"},
	} {
		words := make([]string, len(tc.words))
		for i, w := range tc.words {
			words[i] = "'" + w + "'"
		}
		prog := "source " + path + "; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
			string(rune('0'+len(tc.words)-1)) + "; _rota; echo \"${COMPREPLY[*]}\""
		out, err := exec.Command("bash", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%q completes to %q, want %q", strings.Join(tc.words, " "), got, tc.want)
		}
	}
}
