package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

func helpText(t *testing.T, topic string) string {
	t.Helper()
	args := []string{topic}
	if topic == "" {
		args = nil
	}
	code, out, errOut := testRun{}.run(t, "help", args...)
	if code != ExitOK || out == "" {
		t.Fatalf("rota help %s: exit %d, stderr %q", topic, code, errOut)
	}
	return out
}

// TestHelpSpecHasEveryField keeps rota help spec in step with api.JobSpec: every JSON
// field is described, and nothing else is.
func TestHelpSpecHasEveryField(t *testing.T) {
	var fields []string
	typ := reflect.TypeFor[api.JobSpec]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields = append(fields, name)
		}
	}
	text := helpText(t, "spec")
	for _, f := range fields {
		if !strings.Contains(text, "\n  "+f+" ") {
			t.Errorf("rota help spec does not describe %s", f)
		}
	}
	for _, f := range specFields {
		if !slices.Contains(fields, f.name) {
			t.Errorf("rota help spec describes %s, which api.JobSpec lacks", f.name)
		}
	}
}

// TestHelpJobHasTheContract keeps rota help job in step with the api package: every
// variable of env.go and every Reason constant is explained.
func TestHelpJobHasTheContract(t *testing.T) {
	text := helpText(t, "job")
	for file, prefix := range map[string]string{"env.go": "Env", "types.go": "Reason"} {
		for _, v := range stringConsts(t, "../api/"+file, prefix) {
			if !strings.Contains(text, "\n  "+v+" ") {
				t.Errorf("rota help job does not explain %s (api/%s)", v, file)
			}
		}
	}
	for _, want := range []string{"ROTA_EVENTS_FILE", "ROTA_NOTICE_FILE", `"checkpoint"`, `"deadline"`, "128"} {
		if !strings.Contains(text, want) {
			t.Errorf("rota help job lacks %s", want)
		}
	}
}

// stringConsts returns the values of the string constants of file whose names start with
// prefix.
func stringConsts(t *testing.T, file, prefix string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					values = append(values, v)
				}
			}
		}
	}
	if len(values) == 0 {
		t.Fatalf("no %s constants in %s", prefix, file)
	}
	return values
}

func TestHelpTopics(t *testing.T) {
	out := helpText(t, "")
	for _, topic := range helpTopics {
		if !strings.Contains(out, "  "+topic.name+" ") {
			t.Errorf("rota help does not list %s", topic.name)
		}
		helpText(t, topic.name)
	}
	if code, _, errOut := (testRun{}).run(t, "help", "queue"); code != ExitOK || !strings.Contains(errOut, "usage: rota queue") {
		t.Errorf("rota help queue: exit %d, stderr %q; want queue's usage", code, errOut)
	}
	if code, _, errOut := (testRun{}).run(t, "help", "nonsense"); code != ExitUsage || !strings.Contains(errOut, `unknown topic "nonsense"`) {
		t.Errorf("rota help nonsense: exit %d, stderr %q", code, errOut)
	}
}

// TestEndReasonsListsEveryReason keeps api.EndReasons, which the server's metrics count
// by, in step with the Reason constants that rota help job explains.
func TestEndReasonsListsEveryReason(t *testing.T) {
	consts := stringConsts(t, "../api/types.go", "Reason")
	listed := slices.Clone(api.EndReasons)
	slices.Sort(consts)
	slices.Sort(listed)
	if !slices.Equal(consts, listed) {
		t.Fatalf("api.EndReasons = %v, the Reason constants are %v", listed, consts)
	}
}
