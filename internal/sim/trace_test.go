package sim

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func mustLoad(t *testing.T, path, format string) *Trace {
	t.Helper()
	tr, err := LoadTrace(path, format, false)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestPhillyExcerpt(t *testing.T) {
	tr := mustLoad(t, "testdata/philly_excerpt.csv", "philly")
	if tr.Rows != 24 || len(tr.Jobs) != 24 || len(tr.Skipped) != 0 {
		t.Fatalf("rows %d, jobs %d, skipped %v; want 24, 24, none", tr.Rows, len(tr.Jobs), tr.Skipped)
	}
	// Rows are not in time order; jobs come out sorted and numbered by submit.
	first := tr.Jobs[0]
	want := Job{
		ID: 1, Line: 4, Submit: time.Date(2017, 9, 29, 7, 58, 32, 0, time.UTC),
		Duration: 860662 * time.Second, GPUs: 1, Team: "6c71a0",
	}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("first job = %+v\nwant %+v", first, want)
	}
	for i := 1; i < len(tr.Jobs); i++ {
		if tr.Jobs[i].Submit.Before(tr.Jobs[i-1].Submit) || tr.Jobs[i].ID != int64(i+1) {
			t.Fatalf("jobs not numbered in submit order at %d", i)
		}
	}
	var sixteen *Job
	for i := range tr.Jobs {
		if tr.Jobs[i].GPUs == 16 {
			sixteen = &tr.Jobs[i]
		}
	}
	if sixteen == nil || sixteen.Line != 21 || sixteen.Team != "11cb48" || sixteen.Duration != 195*time.Second {
		t.Errorf("16-GPU job = %+v; want line 21 (after the blank line), team 11cb48, 195s", sixteen)
	}
	w, err := Prepare(tr, PhillyCluster(), true)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range w.Jobs {
		if j.GPUs == 16 && (w.shapes[i] != shape{nodes: 2, gpusPerNode: 8}) {
			t.Errorf("16 GPUs on 8-GPU nodes: shape %+v, want 2×8", w.shapes[i])
		}
	}
}

func TestPhillyBadRows(t *testing.T) {
	tr := mustLoad(t, "testdata/philly_bad.csv", "philly")
	want := []BadRow{
		{3, `bad timestamp "2017-13-09 07:01:55": want YYYY-MM-DD HH:MM:SS`},
		{4, `bad duration: negative duration -5 s`},
		{5, `bad num_gpus "0": want a whole number from 1 to 4096`},
		{6, `has 4 fields, header has 5`},
		{8, `bad duration: "abc" is not a number of seconds`},
	}
	if !reflect.DeepEqual(tr.Skipped, want) {
		t.Errorf("skipped:\n%v\nwant\n%v", tr.Skipped, want)
	}
	if tr.Rows != 8 || len(tr.Jobs) != 3 {
		t.Errorf("rows %d, jobs %d; want 8 rows (the blank line is not one), 3 jobs", tr.Rows, len(tr.Jobs))
	}
	w, err := Prepare(tr, PhillyCluster(), false)
	if err != nil {
		t.Fatal(err)
	}
	last := w.Skipped[len(w.Skipped)-1]
	if len(w.Jobs) != 2 || last.Line != 9 || !strings.Contains(last.Reason, "needs 512 nodes with 8 GPUs each, 300 have that") {
		t.Errorf("after Prepare: %d jobs, last skipped %v; want 2 jobs and line 9 infeasible", len(w.Jobs), last)
	}
	if _, err := Prepare(tr, PhillyCluster(), true); !errors.Is(err, ErrBadRow) {
		t.Errorf("strict Prepare: err %v, want ErrBadRow", err)
	}

	_, err = LoadTrace("testdata/philly_bad.csv", "philly", true)
	if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), "line 3:") {
		t.Errorf("strict load: err %v, want ErrBadRow naming line 3", err)
	}
}

// TestMalformedRows: rows that are not CSV, or not of the header's width, cost their own
// line and no other, in every format, and a strict load names the first of them. An
// unterminated quote used to swallow the rest of the file (encoding/csv reads on to the next
// quote) and, earlier, panicked in csv.Reader.FieldPos.
func TestMalformedRows(t *testing.T) {
	for _, tc := range []struct {
		format, header, good string
	}{
		{"alibaba-gpu2023", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time", "p,1000,1024,1,1000,0,60,0"},
		{"philly", "timestamp,duration,num_gpus,gpu_time,cluster", "2017-10-09 07:01:55,66,1,66,a"},
		{"rota", "submit,gpus,duration_s", "2025-01-06T00:00:00Z,1,600"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			in := strings.Join([]string{
				tc.header,
				tc.good,                   // line 2
				`"` + tc.good,             // 3: an unterminated quote
				tc.good,                   // 4
				"x\x00\xff\"y," + tc.good, // 5: stray bytes and a bare quote
				tc.good + ",extra",        // 6: a field too many
				"a,b",                     // 7: too few
				tc.good,                   // 8, without a final line break
			}, "\n")
			tr, err := ReadTrace(strings.NewReader(in), tc.format, false)
			if err != nil {
				t.Fatal(err)
			}
			var lines []int
			for _, b := range tr.Skipped {
				lines = append(lines, b.Line)
			}
			if want := []int{3, 5, 6, 7}; !reflect.DeepEqual(lines, want) {
				t.Errorf("skipped %v, want lines %v", tr.Skipped, want)
			}
			if len(tr.Jobs) != 3 || tr.Rows != 7 {
				t.Errorf("%d jobs of %d rows, want 3 of 7", len(tr.Jobs), tr.Rows)
			}
			if !strings.Contains(tr.Skipped[0].Reason, "malformed CSV") {
				t.Errorf("line 3: %q, want malformed CSV", tr.Skipped[0].Reason)
			}
			_, err = ReadTrace(strings.NewReader(in), tc.format, true)
			if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), "line 3:") {
				t.Errorf("strict: %v, want ErrBadRow naming line 3", err)
			}
		})
	}
}

func TestMissingColumn(t *testing.T) {
	_, err := LoadTrace("testdata/philly_no_gpus_column.csv", "philly", false)
	if err == nil || !strings.Contains(err.Error(), "lacks column(s) num_gpus") {
		t.Errorf("err = %v, want the missing column named", err)
	}
	if _, err := ReadTrace(strings.NewReader(""), "rota", false); err == nil {
		t.Error("an empty file loaded without error")
	}
	if _, err := ReadTrace(strings.NewReader("a\n"), "helios", false); err == nil {
		t.Error("an unknown format loaded without error")
	}
}

func TestAlibabaExcerpt(t *testing.T) {
	tr := mustLoad(t, "testdata/alibaba_pods.csv", "alibaba-gpu2023")
	if tr.Rows != 19 || len(tr.Jobs) != 19 || len(tr.Skipped) != 0 {
		t.Fatalf("rows %d, jobs %d, skipped %v", tr.Rows, len(tr.Jobs), tr.Skipped)
	}
	if want := []string{"3 tasks ask for a fraction of a GPU: a replay rounds each up to 1 whole GPU, --fill keeps them fractional"}; !reflect.DeepEqual(tr.Notes, want) {
		t.Errorf("notes %q, want %q", tr.Notes, want)
	}
	byName := map[string]Job{}
	for _, j := range tr.Jobs {
		byName[j.Name] = j
	}
	cases := []struct {
		name string
		want Job
	}{
		// Fractional (460 milli-GPU): one whole GPU in a replay, 460 milli-GPU with --fill.
		// Runs from scheduled to deletion time.
		{"openb-pod-0001", Job{GPUs: 1, GPUMilli: 460, CPUs: 6, CPUMilli: 6000, MemoryMB: 12288, Team: "LS",
			Submit: alibabaEpoch.Add(427061 * time.Second), Duration: (12902960 - 427061) * time.Second}},
		// CPU only; scheduled 2 s after creation.
		{"openb-pod-0005", Job{GPUs: 0, CPUs: 20, CPUMilli: 20000, MemoryMB: 65536, Team: "LS",
			Submit: alibabaEpoch.Add(2759674 * time.Second), Duration: (12902960 - 2759676) * time.Second}},
		// Never scheduled: runs from creation to deletion. 11908 milli-CPUs round up to 12.
		{"openb-pod-0061", Job{GPUs: 1, CPUs: 12, CPUMilli: 11908, MemoryMB: 47104, Team: "BE",
			Submit: alibabaEpoch.Add(10001278 * time.Second), Duration: 125 * time.Second}},
		{"openb-pod-0017", Job{GPUs: 8, CPUs: 88, CPUMilli: 88000, MemoryMB: 327680, Team: "Burstable",
			Submit: alibabaEpoch.Add(9437497 * time.Second), Duration: (10769854 - 9437497) * time.Second}},
	}
	for _, c := range cases {
		got := byName[c.name]
		got.ID, got.Line, got.Name = 0, 0, ""
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s = %+v\nwant %+v", c.name, got, c.want)
		}
	}

	bad := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"p1,1000,10,1,1000,V100M16,LS,Running,10,20,10\n" +
		"p2,1000,10,1,1000,V100M16|T4,LS,Running,10,20,10\n" +
		"p3,1000,10,1,1000,,LS,Running,30,20,30\n" +
		"p4,1000,10,0,500,,LS,Running,10,20,10\n" +
		"p5,-1000,10,1,1000,,LS,Running,10,20,10\n" +
		"p6,1000,10,1,1000,,LS,Running,,20,\n"
	tr, err := ReadTrace(strings.NewReader(bad), "alibaba-gpu2023", false)
	if err != nil {
		t.Fatal(err)
	}
	wantSkipped := []BadRow{
		{4, "deletion_time 20 is before the start 30"},
		{5, "gpu_milli 500 without num_gpu"},
		{6, `negative cpu_milli -1000`},
		{7, `bad creation_time "": want a whole number`},
	}
	if !reflect.DeepEqual(tr.Skipped, wantSkipped) {
		t.Errorf("skipped %v\nwant %v", tr.Skipped, wantSkipped)
	}
	if len(tr.Jobs) != 2 || tr.Jobs[0].GPUModel != "V100M16" || tr.Jobs[1].GPUModel != "" ||
		!reflect.DeepEqual(tr.Jobs[1].GPUModels, []string{"V100M16", "T4"}) {
		t.Errorf("jobs %+v: want p1 constrained to V100M16, p2 to any model", tr.Jobs)
	}
	if want := []string{"1 tasks allowed several GPU models and take whichever of them starts first (the fastest, where speeds are known)"}; !reflect.DeepEqual(tr.Notes, want) {
		t.Errorf("notes %q, want %q", tr.Notes, want)
	}
}

// TestAlibabaUntimed: a task list without time columns loads as untimed, for --fill; one
// with half of them is refused.
func TestAlibabaUntimed(t *testing.T) {
	in := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np1,1500,10,1,250,\np2,1000,10,2,1000,T4\n"
	tr, err := ReadTrace(strings.NewReader(in), "alibaba-gpu2023", true)
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Untimed || len(tr.Jobs) != 2 || tr.Jobs[0].GPUMilli != 250 || tr.Jobs[0].CPUMilli != 1500 ||
		tr.Jobs[1].GPUModel != "T4" || tr.Jobs[0].Duration != 0 {
		t.Errorf("untimed %v, jobs %+v", tr.Untimed, tr.Jobs)
	}
	half := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\np1,1500,10,1,250,0\n"
	if _, err := ReadTrace(strings.NewReader(half), "alibaba-gpu2023", false); err == nil || !strings.Contains(err.Error(), "deletion_time") {
		t.Errorf("creation_time without deletion_time: err %v", err)
	}
}

func TestAlibabaNodes(t *testing.T) {
	c, err := LoadCluster("testdata/alibaba_nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != 7 || c.GPUs() != 30 {
		t.Fatalf("%d nodes, %d GPUs; want 7, 30", len(c.Nodes), c.GPUs())
	}
	want := NodeSpec{Name: "openb-node-0244", GPUs: 2, GPUModel: "T4", CPUs: 104, MemoryMB: 524288}
	if !reflect.DeepEqual(c.Nodes[3], want) {
		t.Errorf("node 3 = %+v, want %+v", c.Nodes[3], want)
	}
	if c.DefaultQueue != "train" || len(c.Queues) != 6 {
		t.Errorf("queues %+v, default %q: want the server's six default queues, default train", c.Queues, c.DefaultQueue)
	}
}

func TestRotaRoundTrip(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	recs := []RotaRecord{
		{ID: 7, Submit: t0, Start: t0.Add(5 * time.Minute), End: t0.Add(65 * time.Minute), TimeLimit: 2 * time.Hour,
			GPUs: 8, GPUModel: "H100", CPUs: 32, MemoryMB: 128000, Queue: "train", Team: "vision", User: "ann", State: api.StateSucceeded},
		{ID: 8, Submit: t0.Add(time.Second), Start: t0.Add(time.Minute), End: t0.Add(30 * time.Minute), Duration: 90*time.Minute + 500*time.Millisecond,
			GPUs: 16, Nodes: 2, Queue: "batch", Team: "speech", User: "ben, jr", State: api.StateTimeout},
	}
	var buf bytes.Buffer
	if err := WriteRotaTrace(&buf, recs); err != nil {
		t.Fatal(err)
	}
	wantText := "id,submit,start,end,duration_s,time_limit_s,gpus,nodes,gpu_model,cpus,memory_mb,queue,team,user,state\n" +
		"7,2025-03-01T09:00:00Z,2025-03-01T09:05:00Z,2025-03-01T10:05:00Z,,7200,8,0,H100,32,128000,train,vision,ann,SUCCEEDED\n" +
		"8,2025-03-01T09:00:01Z,2025-03-01T09:01:00Z,2025-03-01T09:30:00Z,5400.5,,16,2,,0,0,batch,speech,\"ben, jr\",TIMEOUT\n"
	if buf.String() != wantText {
		t.Errorf("written:\n%s\nwant:\n%s", buf.String(), wantText)
	}
	tr, err := ReadTrace(&buf, "rota", true)
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: 1, Name: "7", Line: 2, Submit: t0, Duration: time.Hour, TimeLimit: 2 * time.Hour, GPUs: 8, GPUModel: "H100",
			CPUs: 32, MemoryMB: 128000, Queue: "train", Team: "vision", User: "ann"},
		{ID: 2, Name: "8", Line: 3, Submit: t0.Add(time.Second), Duration: 90*time.Minute + 500*time.Millisecond, GPUs: 16, Nodes: 2,
			Queue: "batch", Team: "speech", User: "ben, jr"},
	}
	if !reflect.DeepEqual(tr.Jobs, want) {
		t.Errorf("read back:\n%+v\nwant\n%+v", tr.Jobs, want)
	}
}

func TestRotaBadRows(t *testing.T) {
	tr := mustLoad(t, "testdata/rota_bad.csv", "rota")
	c, err := LoadCluster("testdata/scenarios/one_gpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, c, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []BadRow{
		{3, "never started (state CANCELLED): nothing to replay"},
		{4, `bad submit time "yesterday": want RFC 3339, e.g. 2025-01-02T15:04:05Z`},
		{5, "end 2025-01-06T01:00:00Z is before start 2025-01-06T02:00:00Z"},
		{6, `unknown state "DONE"`},
		{7, "negative duration -600 s"},
		{8, "3 GPUs do not divide evenly over 2 nodes"},
		{9, "no node can ever run it: needs 1 H100 GPUs on one node"},
		{10, `queue "nope" is not in the cluster`},
	}
	if !reflect.DeepEqual(w.Skipped, want) {
		t.Errorf("skipped:\n%v\nwant\n%v", w.Skipped, want)
	}
	if tr.Rows != 10 || len(w.Jobs) != 2 || w.Jobs[0].Duration != time.Hour || w.Jobs[0].Queue != "train" {
		t.Errorf("rows %d, jobs %+v; want 10 rows, jobs 1 (1h from start and end) and 10", tr.Rows, w.Jobs)
	}
}

func TestClusterFile(t *testing.T) {
	c, err := LoadCluster("testdata/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.Name)
	}
	if want := []string{"a100-000", "a100-001", "a100-002", "l4-box"}; !reflect.DeepEqual(names, want) {
		t.Errorf("nodes %v, want %v", names, want)
	}
	if c.GPUs() != 28 || c.Nodes[1].Labels["rack"] != "r1" || c.DefaultQueue != "train" || len(c.Queues) != 3 {
		t.Errorf("cluster %+v", c)
	}
	if c.Teams[1].Weight != 1 || c.Teams[0].Quota["A100"] != (QuotaSpec{8, 16}) {
		t.Errorf("teams %+v: want speech's weight defaulted to 1 and vision's A100 quota", c.Teams)
	}

	if err := c.AddNodes("2xA100,1xH100:4"); err != nil {
		t.Fatal(err)
	}
	added := c.Nodes[4:]
	if len(added) != 3 || added[0].Name != "add-a100-000" || added[0].GPUs != 8 || added[0].CPUs != 128 ||
		added[2].Name != "add-h100-000" || added[2].GPUs != 4 || added[2].GPUModel != "H100" {
		t.Errorf("added %+v", added)
	}
	for _, bad := range []string{"4H100", "0xH100", "2xH100:0", "x"} {
		if err := c.AddNodes(bad); err == nil {
			t.Errorf("AddNodes(%q) succeeded", bad)
		}
	}

	for _, tc := range []struct{ yaml, want string }{
		{"nodes: [{name: a, gpus: 1, gpu_model: X, cpus: 1, memory_mb: 1, colour: red}]", "field colour not found"},
		{"nodes: []", "cluster has no nodes"},
		{"nodes: [{name: a, gpus: 1, cpus: 1, memory_mb: 1}]", "has GPUs but no gpu_model"},
		{"nodes: [{name: a, count: 2, gpus: 0, cpus: 1, memory_mb: 1}, {name: a-001, cpus: 1, memory_mb: 1}]", "node a-001 is defined twice"},
		{"nodes: [{name: a, cpus: 1, memory_mb: 1}]\ndefault_queue: nope", "default_queue nope is not one of the queues"},
		{"", "empty cluster file"},
	} {
		if _, err := ParseCluster([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseCluster(%q): err %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
