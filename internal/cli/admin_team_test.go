package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// team set --project changes one project of the team and leaves the team's own quotas; the
// team's table then lists the project under the team.
func TestTeamSetProject(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "team", "set", "vision", "--project", "det", "--quota", "*=2:4",
		"--cpus", "0:16", "--memory", "none", "--budget", "week:10:20")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := []api.Project{{Name: "det", Quotas: map[string]api.Quota{"*": {Guaranteed: 2, Limit: 4}}, CPUQuota: &api.Quota{Limit: 16},
		Budget: &api.Budget{Period: api.BudgetWeek, Soft: 10, Hard: 20}}}
	if !reflect.DeepEqual(srv.team.Projects, want) || !reflect.DeepEqual(srv.team.Quotas, map[string]api.Quota{"*": {Guaranteed: 4, Limit: 8}}) {
		t.Errorf("server got %+v; want the team's quotas as they were and project %+v", srv.team, want[0])
	}
	if !strings.Contains(out, "  project det: * 2/4, cpus 0/16, budget week soft 10 hard 20 GPU-hours\n") {
		t.Errorf("stdout %q; want the project's line", out)
	}

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--budget", "fortnight:1:2"}, "--budget: want PERIOD:SOFT:HARD with PERIOD one of day, week, month"},
		{[]string{"--budget", "day:30:20"}, "the soft limit 30 is above the hard limit 20"},
		{[]string{"--cpus", "8:4"}, "--cpus: \"8:4\": want 0 <= guaranteed <= limit"},
		{[]string{"--memory", "lots"}, "--memory: want GUARANTEED:LIMIT"},
		{[]string{"--project", "a", "--delete-project", "b"}, "--project and --delete-project exclude each other"},
		{[]string{"--delete-project", "nope"}, `team vision has no project "nope"`},
	} {
		code, _, errOut := run(t, srv.URL, "admin", append([]string{"team", "set", "vision"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, %q; want usage error saying %q", tc.args, code, errOut, tc.says)
		}
	}
}
