package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func TestHoldRelease(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "hold", "43", "42", "99")
	if want := "Held job 43\n"; code != ExitError || out != want ||
		errOut != "rota: job 42: job 42 is running; only a job that has not started can be held\nrota: job 99: no job 99\n" {
		t.Errorf("hold: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	code, out, errOut = run(t, srv.URL, "release", "44_0", "43")
	if want := "Released job 44; it stays held: waits for jobs 41 and 42 to succeed\nReleased job 43 (pending)\n"; code != ExitOK || out != want {
		t.Errorf("release: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	code, out, _ = run(t, srv.URL, "hold", "-o", "json", "43")
	var job api.Job
	if err := json.Unmarshal([]byte(out), &job); code != ExitOK || err != nil || !job.UserHold {
		t.Errorf("hold -o json: exit %d, %v\n%s", code, err, out)
	}
}

func TestSubmitArray(t *testing.T) {
	for _, tc := range []struct {
		array, want string
	}{
		{"0-99%8", "Submitted array job 46: 100 jobs (46-145), at most 8 at once\n46\n"},
		{"1,3,5", "Submitted array job 46: 3 jobs (46-48)\n46\n"},
		{"7", "Submitted array job 46: 1 job (46)\n46\n"},
		{"0-3%4", "Submitted array job 46: 4 jobs (46-49)\n46\n"},
	} {
		srv := newFakeServer(t)
		code, out, errOut := run(t, srv.URL, "submit", "--array", tc.array, "--", "true")
		if code != ExitOK || out != tc.want {
			t.Errorf("--array %s: exit %d, stdout %q, want %q; stderr %q", tc.array, code, out, tc.want, errOut)
		}
	}
}

func TestParseArray(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  []int
		limit int
	}{
		{"0-4", []int{0, 1, 2, 3, 4}, 0},
		{"0-4%2", []int{0, 1, 2, 3, 4}, 2},
		{"1,3,5", []int{1, 3, 5}, 0},
		{"5,1,3%1", []int{1, 3, 5}, 1},
		{"0-10:3", []int{0, 3, 6, 9}, 0},
		{"0-2,10-11:1,20", []int{0, 1, 2, 10, 11, 20}, 0},
		{"7", []int{7}, 0},
		{"007-008", []int{7, 8}, 0},
		{"3-3", []int{3}, 0},
		{"999999", []int{999999}, 0},
		{"0-9%100", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 100},
	} {
		got, limit, err := parseArray(tc.in)
		if err != nil || !slices.Equal(got, tc.want) || limit != tc.limit {
			t.Errorf("parseArray(%q) = %v, %d, %v; want %v, %d", tc.in, got, limit, err, tc.want, tc.limit)
		}
	}
	if got, _, err := parseArray("0-9999"); err != nil || len(got) != 10000 {
		t.Errorf("parseArray(0-9999): %d indices, %v; want 10000", len(got), err)
	}
	for _, in := range []string{
		"", "%8", "0-9%", "0-9%0", "0-9%-1", "0-9%x", "a", "-1", "1-", "-", "5-1", "0-9:0", "3:2", "0-9:",
		"1,,2", "1,", ",1", "1,1", "0-4,3", " 1", "1 ", "+1", "0x10", "1.5", "1000000", "0-10000",
		"0-999999:2", "0-9%8%2", "0-5-9", "0-9:2:3",
	} {
		if got, limit, err := parseArray(in); err == nil {
			t.Errorf("parseArray(%q) = %v, %d; want an error", in, got, limit)
		}
	}
}

func TestQueueSet(t *testing.T) {
	train := fixtureQueues()[1]
	changed := train
	changed.Tier, changed.Pools, changed.Users, changed.Preemptible, changed.MaxTimeLimit = 2, []string{"a", "b"}, nil, true, 0
	idle := train
	idle.IdleAfter, idle.IdleAction, idle.IdleThresholdPct, idle.Images = 1800, api.IdleStop, 7.5, []string{"registry.example.com/ml/", "ghcr.io/acme/"}
	idleOff := train
	idleOff.IdleAfter, idleOff.Images = 0, nil
	slurmMinutes := train
	slurmMinutes.IdleAfter = 90 * 60

	for _, tc := range []struct {
		name string
		args []string
		want api.Queue
		out  string
	}{
		{"existing: only the flags given change",
			[]string{"train", "--tier", "2", "--pools", "a, b", "--users", "", "--preemptible", "--max-time", "0"},
			changed, "Updated queue train\n"},
		{"existing: nothing given",
			[]string{"train"}, train, "Updated queue train\n"},
		{"new: the flags define it",
			[]string{"debug", "--tier=4", "--never-preempt", "--default-time", "30m", "--max-time", "1-00", "--grace", "10s",
				"--max-grace", "60", "--teams", "nlp,vision", "--user-gpu-limit", "1"},
			api.Queue{Name: "debug", Tier: 4, NeverPreempt: true, DefaultTimeLimit: 1800, MaxTimeLimit: 86400, Grace: 10, MaxGrace: 60,
				Teams: []string{"nlp", "vision"}, UserGPULimit: 1},
			"Created queue debug\n"},
		{"idle policy and images",
			[]string{"train", "--idle-after", "30m", "--idle-action", "STOP", "--idle-threshold", "7.5%", "--images", "registry.example.com/ml/, ghcr.io/acme/"},
			idle, "Updated queue train\n"},
		{"idle policy off, any image; the rest of the policy stays",
			[]string{"train", "--idle-after", "off", "--images", ""}, idleOff, "Updated queue train\n"},
		{"idle policy off with 0", []string{"train", "--idle-after", "0", "--images="}, idleOff, "Updated queue train\n"},
		{"a bare number is minutes, as for the other times", []string{"train", "--idle-after", "90"}, slurmMinutes, "Updated queue train\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t)
			code, out, errOut := run(t, srv.URL, "admin", append([]string{"queue", "set"}, tc.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !reflect.DeepEqual(srv.queue, tc.want) {
				t.Errorf("server got\n%+v\nwant\n%+v", srv.queue, tc.want)
			}
			if !strings.HasPrefix(out, tc.out+"NAME ") {
				t.Errorf("stdout %q, want %q and the queue's table", out, tc.out)
			}
		})
	}
	srv := newFakeServer(t)
	code, out, _ := run(t, srv.URL, "admin", "queue", "set", "batch", "--tier", "1", "-o", "json")
	var q api.Queue
	if err := json.Unmarshal([]byte(out), &q); code != ExitOK || err != nil || q.Name != "batch" || q.Tier != 1 || !q.Preemptible {
		t.Errorf("queue set -o json: exit %d, %v\n%s", code, err, out)
	}
}

func TestTeamSet(t *testing.T) {
	nlp := fixtureTeams().Teams[0]
	nlp.UsageGPUHours, nlp.GPUsInUse = 0, nil
	merged := nlp
	merged.Quotas = map[string]api.Quota{"H100": {Guaranteed: 4, Limit: 8}, "A100": {Guaranteed: 4, Limit: 8}, "L40S": {Guaranteed: 0, Limit: 2}}
	merged.Members = nil

	for _, tc := range []struct {
		name string
		args []string
		want api.Team
		out  string
	}{
		{"existing: only the flags given change",
			[]string{"nlp", "--quota", "H100=4:8", "--quota", "*=none", "--quota", "L40S=0:2", "--members="},
			merged, "Updated team nlp\n"},
		{"existing: weight",
			[]string{"nlp", "--weight", "3.5"},
			func() api.Team { t := nlp; t.Weight = 3.5; return t }(), "Updated team nlp\n"},
		{"new: weight 1 unless given",
			[]string{"ml-infra", "--quota", "*=1:2", "--members", "zed"},
			api.Team{Name: "ml-infra", Weight: 1, Quotas: map[string]api.Quota{"*": {Guaranteed: 1, Limit: 2}}, Members: []string{"zed"}},
			"Created team ml-infra\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t)
			code, out, errOut := run(t, srv.URL, "admin", append([]string{"team", "set"}, tc.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !reflect.DeepEqual(srv.team, tc.want) {
				t.Errorf("server got\n%+v\nwant\n%+v", srv.team, tc.want)
			}
			if !strings.HasPrefix(out, tc.out+"NAME ") {
				t.Errorf("stdout %q, want %q and the team's table", out, tc.out)
			}
		})
	}
}

func TestParseQuota(t *testing.T) {
	for _, tc := range []struct {
		in    string
		model string
		want  *api.Quota
	}{
		{"H100=8:16", "H100", &api.Quota{Guaranteed: 8, Limit: 16}},
		{"*=2:4", "*", &api.Quota{Guaranteed: 2, Limit: 4}},
		{"A100 = 0 : 0", "A100", &api.Quota{}},
		{"RTX 4090=1:1", "RTX 4090", &api.Quota{Guaranteed: 1, Limit: 1}},
		{"H100=none", "H100", nil},
	} {
		model, q, err := parseQuota(tc.in)
		if err != nil || model != tc.model || !reflect.DeepEqual(q, tc.want) {
			t.Errorf("parseQuota(%q) = %q, %+v, %v; want %q, %+v", tc.in, model, q, err, tc.model, tc.want)
		}
	}
	for _, in := range []string{"", "H100", "H100=", "=8:16", "H100=8", "H100=8:", "H100=:8", "H100=a:b", "H100=-1:4", "H100=8:4", "H100=8:16:32"} {
		if model, q, err := parseQuota(in); err == nil {
			t.Errorf("parseQuota(%q) = %q, %+v; want an error", in, model, q)
		}
	}
}

func TestParseTimes(t *testing.T) {
	local := time.FixedZone("CET", 3600)
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, local)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2026-12-01T09:00:00+01:00", start},
		{"2026-12-01T08:00:00Z", start},
		{"2026-12-01 09:00", start},
		{"2026-12-01 09:00:00", start},
		{"2026-12-01T09:00", start},
		{"2026-12-01", start.Add(-9 * time.Hour)},
		{"now", testNow},
		{"+2h", testNow.Add(2 * time.Hour)},
		{"+1d", testNow.Add(24 * time.Hour)},
		{"+1d12h30m", testNow.Add(36*time.Hour + 30*time.Minute)},
	} {
		got, err := parseWhen(tc.in, testNow, local)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "tomorrow", "+", "+-2h", "+0s", "2026-13-01 09:00", "01/12/2026", "9:00", "+2", "2026-12-01 9am"} {
		if got, err := parseWhen(in, testNow, local); err == nil {
			t.Errorf("parseWhen(%q) = %v, want an error", in, got)
		}
	}
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"4h", start.Add(4 * time.Hour)},
		{"90m", start.Add(90 * time.Minute)},
		{"2d", start.Add(48 * time.Hour)},
		{"+4h", testNow.Add(4 * time.Hour)},
		{"2026-12-01 17:30", start.Add(8*time.Hour + 30*time.Minute)},
	} {
		got, err := parseEnd(tc.in, start, testNow, local)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseEnd(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"-4h", "0s", "0d", "4", "4x"} {
		if got, err := parseEnd(in, start, testNow, local); err == nil {
			t.Errorf("parseEnd(%q) = %v, want an error", in, got)
		}
	}
}

func TestReserve(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "reserve", "--team", "nlp", "--gpus", "16", "--model", "H100", "--pool", "train",
		"--start", "2026-03-02 09:00", "--end", "4h", "--name", "release-run")
	want := "Reserved 16 GPUs of model H100 in pool train for team nlp from 2026-03-02 09:00:00 UTC to 2026-03-02 13:00:00 UTC (reservation 5)\n5\n"
	if code != ExitOK || out != want {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	wantReq := api.Reservation{Name: "release-run", Team: "nlp", GPUs: 16, Model: "H100", Pool: "train", Start: *at(21 * time.Hour), End: *at(25 * time.Hour)}
	if !reflect.DeepEqual(srv.reservation, wantReq) {
		t.Errorf("server got\n%+v\nwant\n%+v", srv.reservation, wantReq)
	}

	// Whole nodes, by name.
	code, out, errOut = run(t, srv.URL, "admin", "reserve", "--team", "nlp", "--nodes", "node-a,node-b", "--start", "2026-03-02 09:00", "--end", "4h")
	want = "Reserved 16 GPUs on node-a,node-b for team nlp from 2026-03-02 09:00:00 UTC to 2026-03-02 13:00:00 UTC (reservation 5)\n5\n"
	if code != ExitOK || out != want || !slices.Equal(srv.reservation.Nodes, []string{"node-a", "node-b"}) || srv.reservation.GPUs != 0 {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %q\nserver got %+v", code, out, want, errOut, srv.reservation)
	}

	// "reserve list" is "reservations".
	code, out, _ = run(t, srv.URL, "admin", "reserve", "list")
	if _, listed, _ := run(t, srv.URL, "admin", "reservations"); code != ExitOK || out != listed || !strings.Contains(out, "8 GPUs of model H100 in pool train") {
		t.Errorf("reserve list: exit %d, %q; want the reservations table", code, out)
	}

	// --start defaults to now.
	code, _, errOut = run(t, srv.URL, "admin", "reserve", "--team", "nlp", "--gpus", "8", "--end", "+1d")
	if code != ExitOK || !srv.reservation.Start.Equal(testNow) || !srv.reservation.End.Equal(testNow.Add(24*time.Hour)) {
		t.Errorf("exit %d, stderr %q, server got %+v", code, errOut, srv.reservation)
	}
}

func TestUnreserveAndDeletes(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "unreserve", "3", "99")
	if code != ExitError || out != "Deleted reservation 3\n" || errOut != "rota: reservation 99: no such thing: 99\n" {
		t.Errorf("unreserve: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = run(t, srv.URL, "admin", "queue", "delete", "batch")
	if code != ExitOK || out != "Deleted queue batch\n" {
		t.Errorf("queue delete: exit %d, stdout %q", code, out)
	}
	code, out, _ = run(t, srv.URL, "admin", "team", "delete", "nlp", "-o", "json")
	if code != ExitOK || out != "" {
		t.Errorf("team delete -o json: exit %d, stdout %q", code, out)
	}
	code, _, errOut = run(t, srv.URL, "admin", "team", "delete", "nobody")
	if code != ExitError || errOut != "rota: no such thing: nobody\n" {
		t.Errorf("team delete of an unknown team: exit %d, stderr %q", code, errOut)
	}
	want := []string{"/api/v1/reservations/3", "/api/v1/queues/batch", "/api/v1/teams/nlp"}
	if !slices.Equal(srv.deleted, want) {
		t.Errorf("deleted %q, want %q", srv.deleted, want)
	}
}

func TestDrainResume(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "drain", "node-a", "node-b", "nope")
	want := "Draining node-a (no reason given, until resumed): no new jobs start there; 3 jobs still running (42,43,44)\n" +
		"Drained node-b (no reason given, until resumed)\n"
	if code != ExitError || out != want || errOut != "rota: node nope: no node nope\n" {
		t.Errorf("drain: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	if len(srv.drains) != 2 || srv.drains[0] != (api.DrainRequest{}) {
		t.Errorf("a bare drain sent %+v; want no body", srv.drains)
	}

	// A window planned ahead, with its reason and end.
	srv.drains = nil
	code, out, errOut = run(t, srv.URL, "admin", "drain", "node-a", "--reason", "PSU swap", "--at", "+2h", "--until", "4h")
	want = "Planned maintenance of node-a (PSU swap, from 2026-03-01 14:00:00 UTC, until 2026-03-01 18:00:00 UTC): until then only jobs that end by its start start there\n"
	if code != ExitOK || out != want {
		t.Errorf("drain --at: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	if len(srv.drains) != 1 || srv.drains[0].Reason != "PSU swap" || !srv.drains[0].At.Equal(testNow.Add(2*time.Hour)) ||
		!srv.drains[0].Until.Equal(testNow.Add(6*time.Hour)) {
		t.Errorf("drain --at sent %+v; want the reason, +2h and +6h", srv.drains)
	}
	for _, c := range []struct{ args, want string }{
		{"--at tomorrow", `rota admin drain: --at: invalid time "tomorrow"`},
		{"--until 0s", `rota admin drain: --until: invalid time "0s"`},
		{"--at +2h --until +1h", "rota admin drain: --until 2026-03-01 13:00:00 UTC is not after the window's start 2026-03-01 14:00:00 UTC"},
	} {
		code, _, errOut := run(t, srv.URL, "admin", append(append([]string{"drain"}, strings.Fields(c.args)...), "node-b")...)
		if code != ExitUsage || !strings.HasPrefix(errOut, c.want) {
			t.Errorf("drain %s: exit %d, stderr %q; want usage error %q", c.args, code, errOut, c.want)
		}
	}
	code, out, _ = run(t, srv.URL, "admin", "resume", "node-b")
	if code != ExitOK || out != "Resumed node-b (READY)\n" {
		t.Errorf("resume: exit %d, stdout %q", code, out)
	}
	code, out, _ = run(t, srv.URL, "admin", "resume", "-o", "json", "node-a", "node-b")
	var nodes []api.Node
	if err := json.Unmarshal([]byte(out), &nodes); code != ExitOK || err != nil || len(nodes) != 2 {
		t.Errorf("resume -o json of two nodes: exit %d, %v\n%s", code, err, out)
	}
}

func TestApply(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "rota.yaml")
	doc := `# the cluster's queues and teams
queues:
  - name: train
    tier: 1
  - name: batch
    preemptible: true
teams:
  - name: nlp
    weight: 2
    quotas:
      H100: {guaranteed: 8, limit: 16}
`
	os.WriteFile(good, []byte(doc), 0o644)
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "apply", "-f", good)
	if code != ExitOK || out != "Applied: 2 queues, 1 team\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if string(srv.config) != doc || srv.configType != "application/yaml" {
		t.Errorf("server got %q as %q; want the file's bytes as application/yaml", srv.config, srv.configType)
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("queues:\n  - name: train\n    tier: -1\n"), 0o644)
	code, out, errOut = run(t, srv.URL, "admin", "apply", "-f", bad)
	if want := "rota: " + bad + ": line 3: queue train: tier must be 0 or more\n"; code != ExitError || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q\nstderr %q\nwant   %q", code, out, errOut, want)
	}

	code, out, _ = run(t, srv.URL, "admin", "apply", "-o", "json", "-f", good)
	var applied api.Config
	if err := json.Unmarshal([]byte(out), &applied); code != ExitOK || err != nil || len(applied.Queues) != 2 || applied.Teams[0].Quotas["H100"].Limit != 16 {
		t.Errorf("apply -o json: exit %d, %v\n%s", code, err, out)
	}
}

func TestAdminUsage(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{nil, ExitUsage, "usage: rota admin COMMAND"},
		{[]string{"-h"}, ExitOK, "usage: rota admin COMMAND"},
		{[]string{"bogus"}, ExitUsage, "rota admin: unknown command \"bogus\"\n\nusage: rota admin COMMAND"},
		{[]string{"queue"}, ExitUsage, "rota admin queue: want list, set or delete"},
		{[]string{"team", "show"}, ExitUsage, `rota admin: unknown command "team show"`},
		{[]string{"user", "--help"}, ExitOK, "usage: rota admin user COMMAND [flags] [arguments]\n\nCommands:\n  user list "},
		{[]string{"price", "-h"}, ExitOK, "  price set MODEL RATE [--currency USD]\n                                  set the price"},
		{[]string{"drain"}, ExitUsage, "rota admin drain: no node given"},
		{[]string{"drain", "--bogus", "node-a"}, ExitUsage, "flag provided but not defined: -bogus"},
		{[]string{"queue", "list", "extra"}, ExitUsage, `unexpected argument "extra"`},
		{[]string{"queue", "set"}, ExitUsage, "rota admin queue set: want exactly one name, got 0 arguments"},
		{[]string{"queue", "set", "a", "b"}, ExitUsage, "want exactly one name, got 2 arguments"},
		{[]string{"queue", "set", "x", "--preemptible", "--never-preempt"}, ExitUsage, "--preemptible and --never-preempt exclude each other"},
		{[]string{"queue", "set", "x", "--max-time", "forever"}, ExitUsage, `--max-time: invalid duration "forever"`},
		{[]string{"queue", "set", "x", "--user-gpu-limit", "-1"}, ExitUsage, "--user-gpu-limit: must be 0 or more, got -1"},
		{[]string{"queue", "set", "x", "--idle-after", "soon"}, ExitUsage,
			`rota admin queue set: --idle-after: invalid duration "soon": want e.g. 30m, 2h or 01:30:00, or 0 or off to turn the idle policy off`},
		{[]string{"queue", "set", "x", "--idle-after", "-5m"}, ExitUsage, `--idle-after: invalid duration "-5m"`},
		{[]string{"queue", "set", "x", "--idle-after", "never"}, ExitUsage, `--idle-after: invalid duration "never"`},
		{[]string{"queue", "set", "x", "--idle-action", "pause"}, ExitUsage, `--idle-action: unknown action "pause": want warn or stop`},
		{[]string{"queue", "set", "x", "--idle-action", ""}, ExitUsage, `--idle-action: unknown action "": want warn or stop`},
		{[]string{"queue", "set", "x", "--idle-threshold", "0"}, ExitUsage,
			`--idle-threshold: invalid percentage "0": want a number above 0 and at most 100, e.g. 5`},
		{[]string{"queue", "set", "x", "--idle-threshold", "101"}, ExitUsage, `--idle-threshold: invalid percentage "101"`},
		{[]string{"queue", "set", "x", "--idle-threshold", "-1"}, ExitUsage, `--idle-threshold: invalid percentage "-1"`},
		{[]string{"queue", "set", "x", "--idle-threshold", "NaN"}, ExitUsage, `--idle-threshold: invalid percentage "NaN"`},
		{[]string{"queue", "set", "x", "--idle-threshold", "five"}, ExitUsage, `--idle-threshold: invalid percentage "five"`},
		{[]string{"queue", "set", "x", "--images", "ok.io/,bad image"}, ExitUsage,
			`--images: invalid image "bad image": an image reference has no spaces or control characters`},
		{[]string{"queue", "delete"}, ExitUsage, "want exactly one name"},
		{[]string{"team", "set", "nlp", "--quota", "H100=8"}, ExitUsage, `invalid value "H100=8" for flag -quota: want MODEL=GUARANTEED:LIMIT`},
		{[]string{"team", "set", "nlp", "--quota", "H100=16:8"}, ExitUsage, "the limit must be at least the guaranteed GPUs"},
		{[]string{"team", "set", "nlp", "--weight", "0"}, ExitUsage, "--weight must be more than 0, got 0"},
		{[]string{"team", "set", "nlp", "--weight", "NaN"}, ExitUsage, "--weight must be more than 0"},
		{[]string{"team", "set", ""}, ExitUsage, "the name is empty"},
		{[]string{"reserve", "--gpus", "8", "--end", "4h"}, ExitUsage, "--team is required"},
		{[]string{"reserve", "--team", "nlp", "--end", "4h"}, ExitUsage, "--gpus must be 1 or more, got 0"},
		{[]string{"reserve", "--team", "nlp", "--gpus", "-2", "--end", "4h"}, ExitUsage, "--gpus must be 1 or more, got -2"},
		{[]string{"reserve", "--team", "nlp", "--gpus", "2", "--nodes", "node-a", "--end", "4h"}, ExitUsage, "give one or the other"},
		{[]string{"reserve", "--team", "nlp", "--model", "H100", "--nodes", "node-a", "--end", "4h"}, ExitUsage, "give one or the other"},
		{[]string{"reserve", "--team", "nlp", "--nodes", "node-a,,node-b", "--end", "4h"}, ExitUsage, "an empty node name"},
		{[]string{"reserve", "--team", "nlp", "--gpus", "8"}, ExitUsage, "--end is required"},
		{[]string{"reserve", "--team", "nlp", "--gpus", "8", "--start", "soon", "--end", "4h"}, ExitUsage, `--start: invalid time "soon"`},
		{[]string{"reserve", "--team", "nlp", "--gpus", "8", "--start", "+2h", "--end", "2026-03-01 13:00"}, ExitUsage,
			"--end 2026-03-01 13:00:00 UTC is not after --start 2026-03-01 14:00:00 UTC"},
		{[]string{"reservations", "x"}, ExitUsage, `unexpected argument "x"`},
		{[]string{"unreserve"}, ExitUsage, "no reservation ID given"},
		{[]string{"unreserve", "3", "x"}, ExitUsage, `invalid reservation ID "x"`},
		{[]string{"apply"}, ExitUsage, "rota admin apply: -f FILE is required"},
		{[]string{"apply", "-f", filepath.Join(t.TempDir(), "nope.yaml")}, ExitUsage, "nope.yaml: no such file"},
		{[]string{"team", "list", "-h"}, ExitOK, "usage: rota admin team list"},
	} {
		code, out, errOut := run(t, srv.URL, "admin", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("admin %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
		if out != "" {
			t.Errorf("admin %q: stdout %q, want nothing", tc.args, out)
		}
	}
	// None of these should have changed anything.
	if srv.queue.Name != "" || srv.team.Name != "" || srv.reservation.Team != "" || srv.deleted != nil {
		t.Errorf("a usage error reached the server: %+v %+v %+v %q", srv.queue, srv.team, srv.reservation, srv.deleted)
	}
}

func TestVerbsListsEveryVerb(t *testing.T) {
	var names []string
	for _, v := range Verbs() {
		names = append(names, v.Name)
	}
	for _, want := range []string{"submit", "queue", "show", "why", "cancel", "hold", "release", "logs", "nodes", "login", "logout", "whoami", "admin"} {
		if !slices.Contains(names, want) {
			t.Errorf("Verbs() lacks %q: %q", want, names)
		}
	}
}
