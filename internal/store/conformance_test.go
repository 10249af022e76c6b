package store

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// runConformance runs the behaviour every backend must show. newURL returns the URL of a
// fresh, empty store; each subtest gets its own and may Open it several times.
func runConformance(t *testing.T, newURL func(t *testing.T) string) {
	tests := []struct {
		name string
		run  func(t *testing.T, url string)
	}{
		{"EmptyLoad", testEmptyLoad},
		{"RoundTrip", testRoundTrip},
		{"TimesComeBackInUTC", testTimesInUTC},
		{"UpsertReplaces", testUpsertReplaces},
		{"Deletes", testDeletes},
		{"EventIDsAndFilters", testEvents},
		{"FailedCommitLeavesNothing", testFailedCommit},
		{"CancelledContextCommitsNothing", testCancelledCommit},
		{"ReopenKeepsEverything", testReopen},
		{"MigrationsIdempotent", testMigrationsIdempotent},
		{"MigrateFromVersion1", testMigrateFromVersion1},
		{"NewerSchemaRefused", testNewerSchemaRefused},
		{"ConcurrentCommits", testConcurrentCommits},
		{"BigBatch", testBigBatch},
		{"CommitSurvivesKill", testSurvivesKill},
		{"IdentityAndSettings", testIdentity},
		{"AuditFilters", testAuditFilters},
		{"DeleteNodes", testDeleteNodes},
		{"Requests", testRequests},
		{"JobReads", testJobReads},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newURL(t)) })
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// openStore opens url and closes the store when t ends.
func openStore(t *testing.T, url string) Store {
	t.Helper()
	s, err := Open(context.Background(), url, testLogger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func commit(t *testing.T, s Store, b *Batch) {
	t.Helper()
	if err := s.Commit(context.Background(), b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// contents is everything a store holds, as its Load methods and Events return it.
type contents struct {
	Jobs         []api.Job
	Attempts     []api.Attempt
	Nodes        []api.Node
	Queues       []api.Queue
	Teams        []api.Team
	Reservations []api.Reservation
	Events       []api.Event
}

func load(t *testing.T, s Store) contents {
	t.Helper()
	ctx := context.Background()
	var c contents
	var err error
	if c.Jobs, err = s.LoadJobs(ctx); err != nil {
		t.Fatalf("LoadJobs: %v", err)
	}
	if c.Attempts, err = s.LoadAttempts(ctx); err != nil {
		t.Fatalf("LoadAttempts: %v", err)
	}
	if c.Nodes, err = s.LoadNodes(ctx); err != nil {
		t.Fatalf("LoadNodes: %v", err)
	}
	if c.Queues, err = s.LoadQueues(ctx); err != nil {
		t.Fatalf("LoadQueues: %v", err)
	}
	if c.Teams, err = s.LoadTeams(ctx); err != nil {
		t.Fatalf("LoadTeams: %v", err)
	}
	if c.Reservations, err = s.LoadReservations(ctx); err != nil {
		t.Fatalf("LoadReservations: %v", err)
	}
	if c.Events, err = s.Events(ctx, EventFilter{}); err != nil {
		t.Fatalf("Events: %v", err)
	}
	return c
}

func events(t *testing.T, s Store, f EventFilter) []api.Event {
	t.Helper()
	es, err := s.Events(context.Background(), f)
	if err != nil {
		t.Fatalf("Events(%+v): %v", f, err)
	}
	return es
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func eventIDs(es []api.Event) []int64 {
	ids := make([]int64, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

// t0 has nanoseconds, so a store that rounds times fails the round trip.
var t0 = time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)

func ptr[T any](v T) *T { return &v }

// fullJob sets every field, pointers and the API-only Priority included; checkAllSet
// proves it. storedJob is what the store gives back.
func fullJob(id int64) api.Job {
	return api.Job{
		ID: id,
		Spec: api.JobSpec{
			Name: "resnet", Queue: "train", Team: "vision", Project: "detection", User: "ada",
			Command: []string{"python", "train.py", "--lr=3e-4"},
			WorkDir: "/home/ada/resnet",
			Env:     map[string]string{"WANDB_MODE": "offline", "SEED": "7"},
			GPUs:    16, GPUsPerNode: 8, Nodes: 2, GPUModel: "H100", CPUs: 64, MemoryMB: 512000, GPUShare: 0.25, GPUMemoryMB: 20480, TTY: true,
			TimeLimit: 86400, Signal: "SIGUSR1", Grace: 120,
			After: []int64{3, 4}, AfterOK: []int64{5}, Array: "0-99%8", Hold: true, Nice: -5,
			Retries: ptr(3), RestartPolicy: api.RestartOnFailure, Image: "registry.example.com/ml/torch:2.4",
			Notify:   []api.Notify{{URL: "https://hooks.example.com/j", Events: []string{api.NotifyFailed}}},
			Deadline: ptr(t0.Add(30 * time.Hour)), DeadlineKind: api.DeadlineFinish, CUDA: ">=12.4,<13", Driver: ">=550",
		},
		State:            api.StateRunning,
		Reason:           api.ReasonPreempted,
		Message:          "preempted by job 9 (urgent) after 2h10m; checkpoint at step 1200",
		SubmitTime:       t0,
		StartTime:        ptr(t0.Add(90 * time.Second)),
		EndTime:          ptr(t0.Add(3 * time.Hour)),
		EstimatedStart:   ptr(t0.Add(time.Minute)),
		Attempts:         2,
		Nodes:            []string{"gpu-01", "gpu-02"},
		GPUIDs:           []string{"GPU-0a1b", "GPU-2c3d"},
		ExitCode:         ptr(137),
		CancelRequested:  true,
		PreemptRequested: true,
		UserHold:         true,
		ArrayID:          id - 1,
		ArrayIndex:       ptr(1),
		ArrayLimit:       8,
		Borrowing:        true,
		BorrowingInTeam:  true,
		BudgetWarning:    "team vision used 800 of its 800 GPU-hours soft budget for 2026-12",
		LastCheckpoint:   ptr(t0.Add(2 * time.Hour)),
		Priority:         &api.Priority{Tier: 2, Score: 1234.5, FairShare: 0.25, Age: 0.5, Size: 0.125, Nice: -5},
		Stopping:         "rank 1 on gpu-02 exited with code 3",
		Failures:         2,
		NotBefore:        ptr(t0.Add(4 * time.Hour)),
		SubmittedBy:      "root",
		Checkpoints:      "node-local",
		IdleSince:        ptr(t0.Add(150 * time.Minute)),
		IdleWarned:       true,
		Usage:            fullUsage(),
		DeadlineResult:   api.DeadlineMissed,
		DeadlineMissedBy: 5400,
		DeadlineWarning:  "the deadline looks unreachable",
		Array: &api.ArraySummary{Jobs: 3, FirstIndex: 0, LastIndex: 2, States: map[api.JobState]int{api.StateRunning: 3}, Idle: 1,
			Since: ptr(t0), LongestEndedS: 60, EstimatedStart: ptr(t0.Add(time.Hour)), Reason: "r", Nodes: []string{"gpu-01"}},
	}
}

// fullUsage sets every field of a usage summary.
func fullUsage() *api.Usage {
	return &api.Usage{Samples: 120, First: t0.Add(2 * time.Minute), Last: t0.Add(50 * time.Minute),
		GPUUtilPct: api.Stat{Mean: 71.5, P95: 98.25, Max: 100, Last: 64}, GPUMemoryMB: api.Stat{Mean: 30000, P95: 41000, Max: 42000, Last: 39000},
		CPUPct: api.Stat{Mean: 350.5, P95: 790, Max: 800, Last: 120}, MemoryMB: api.Stat{Mean: 12000, P95: 20000, Max: 21000, Last: 18000},
		PeakMemoryMB: 21500}
}

// storedJob returns j as the store gives it back: without the API-only Priority,
// Checkpoints, Usage, warnings and array summary.
func storedJob(j api.Job) api.Job {
	j.Priority, j.Checkpoints, j.Usage, j.DeadlineWarning, j.BudgetWarning, j.Array = nil, "", nil, "", "", nil
	return j
}

// bareJob leaves every pointer, slice and map nil.
func bareJob(id int64) api.Job {
	return api.Job{
		ID:         id,
		Spec:       api.JobSpec{Name: "sweep", Queue: "batch", Team: "nlp", User: "bob", GPUs: 1, CPUs: 4, MemoryMB: 16000},
		State:      api.StatePending,
		SubmitTime: t0.Add(time.Second),
	}
}

func fullAttempt(jobID int64, n int) api.Attempt {
	return api.Attempt{
		JobID: jobID,
		N:     n,
		Placements: []api.Placement{
			{Node: "gpu-01", GPUIndices: []int{4, 5, 6, 7}, GPUIDs: []string{"GPU-0a1b"}, CPUs: 32, MemoryMB: 256000,
				State: api.StateSucceeded, ExitCode: ptr(0), EndTime: ptr(t0.Add(50 * time.Minute)), Reason: "rank_failed", Message: "stopped: rank 1 failed",
				Usage: fullUsage(), GPUShare: 0.5, GPUMemoryMB: 40960, ImageDigest: "sha256:" + strings.Repeat("ab", 32), LogSize: 1530},
			{Node: "gpu-02", GPUIndices: []int{1, 2}, GPUIDs: []string{"GPU-2c3d"}, CPUs: 32, MemoryMB: 256000,
				State: api.StateFailed, ExitCode: ptr(3), EndTime: ptr(t0.Add(49 * time.Minute)), Reason: api.ReasonExitCode, Message: "exited with code 3",
				Usage: fullUsage(), GPUShare: 0.25, GPUMemoryMB: 20480, ImageDigest: "sha256:" + strings.Repeat("cd", 32), LogSize: 1 << 33},
		},
		State:      api.StateFailed,
		AssignTime: t0.Add(time.Minute),
		StartTime:  ptr(t0.Add(2 * time.Minute)),
		EndTime:    ptr(t0.Add(time.Hour)),
		ExitCode:   ptr(1),
		Reason:     api.ReasonExitCode,
		Message:    "rank 1 on gpu-02 exited with code 3; the other ranks were stopped",
	}
}

func bareAttempt(jobID int64, n int) api.Attempt {
	return api.Attempt{JobID: jobID, N: n, State: api.StateAssigned, AssignTime: t0.Add(time.Minute)}
}

func fullNode(name string) api.Node {
	return api.Node{
		Name: name,
		Inventory: api.Inventory{
			CPUs: 128, MemoryMB: 1 << 20,
			GPUs: []api.GPU{
				{Index: 3, UUID: "GPU-0a1b", Model: "H100", MemoryMB: 81559, Healthy: true, Health: "XID 48 cleared",
					Missing: true, PCIBusID: "00000000:3B:00.0", NUMANode: ptr(1), NVLinkPeers: []int{1, 2}, MIGMode: "disabled",
					MIGParent: ptr(0), MIGProfile: "3g.40gb"},
			},
			Labels:        map[string]string{"pool": "train", "rack": "r7"},
			DriverVersion: "550.54.15", CUDAVersion: "12.4", DeviceSource: "nvml", Hostname: name + ".example",
			ContainerRuntime: "podman", Limits: "cgroup2",
		},
		State:          api.NodeDraining,
		LastHeartbeat:  t0.Add(5 * time.Second),
		Agent:          &api.AgentInfo{Instance: "9f2c", PID: 4242, Address: "10.0.0.7:51234", Version: "v1.2.3", CertSerial: "ab12"},
		Syncing:        true,
		SyncEpoch:      3,
		GPUsUsed:       4,
		CPUsUsed:       16,
		Jobs:           []int64{7, 9},
		UsedGPUs:       []int{1, 2, 5},
		IdleGPUs:       []int{5},
		Degraded:       []string{"GPU 3 (GPU-0a1b) is missing: it can no longer be found"},
		HealthCheck:    &api.HealthCheck{Time: t0.Add(4 * time.Second), ExitCode: 2, Output: "checking\nnvlink down"},
		DataDirProblem: "its data dir /var/lib/rota has 0 MiB free",
		ClockOffsetS:   3600,
		Telemetry:      &api.Telemetry{Time: t0},
		Leftovers:      []api.GPUProcess{{GPU: 3, PID: 777, MemoryMB: 300, Command: "python", JobID: 4, Attempt: 1, Since: ptr(t0)}},
		HeldGPUs:       []int{3},
		SharedGPUs:     []api.SharedGPU{{Index: 1, Share: 0.5, MemoryMB: 40960, Tenants: []api.Tenant{{JobID: 9, Share: 0.5, MemoryMB: 40960}}}},
		Maintenance:    &api.Maintenance{Reason: "BIOS update, ticket OPS-7", Start: t0.Add(time.Hour), End: ptr(t0.Add(3 * time.Hour)), By: "olga"},
		Drift:          []api.VersionDrift{{Component: api.DriftDriver, Version: "550.54.15", Wanted: ">=560", Pool: "train"}},
		DriftDrain:     true,
	}
}

// storedNode returns n as the store gives it back: without the fields the API fills in
// from the live state, which are not stored.
func storedNode(n api.Node) api.Node {
	n.GPUsUsed, n.CPUsUsed, n.Jobs, n.UsedGPUs, n.IdleGPUs = 0, 0, nil, nil, nil
	n.Telemetry, n.Leftovers, n.HeldGPUs, n.SharedGPUs, n.ClockOffsetS = nil, nil, nil, nil, 0
	return n
}

func fullQueue(name string) api.Queue {
	return api.Queue{
		Name: name, Tier: 2, Preemptible: true, DefaultTimeLimit: 3600, MaxTimeLimit: 7 * 86400,
		Grace: 60, MaxGrace: 600, NeverPreempt: true, Pools: []string{"train", "spot"},
		Users: []string{"ada", "bob"}, Teams: []string{"vision"}, UserGPULimit: 32,
		RestartPolicy: api.RestartAlways, CheckpointRoot: "/mnt/checkpoints",
		IdleAfter: 1800, IdleAction: api.IdleStop, IdleThresholdPct: 2.5, Images: []string{"registry.example.com/ml/"},
	}
}

// fullTeam sets every field, the API-only usage included; storedTeam is what the store
// gives back.
func fullTeam(name string) api.Team {
	return api.Team{
		Name: name,
		// Weight has a fraction so that a store rounding floats fails the round trip.
		Quotas:        map[string]api.Quota{"H100": {Guaranteed: 16, Limit: 64}, "*": {Guaranteed: 2, Limit: 8}},
		Weight:        1.7,
		Members:       []string{"ada", "bob"},
		Notify:        []api.Notify{{URL: "https://hooks.example.com/vision", Events: []string{api.NotifyEnded}}},
		CPUQuota:      &api.Quota{Guaranteed: 128, Limit: 256},
		MemoryQuotaMB: &api.Quota{Guaranteed: 1 << 20, Limit: 2 << 20},
		Budget:        &api.Budget{Period: api.BudgetMonth, Soft: 800.5, Hard: 1000},
		Projects: []api.Project{{Name: "detection", Quotas: map[string]api.Quota{"H100": {Guaranteed: 8, Limit: 32}},
			CPUQuota: &api.Quota{Limit: 64}, MemoryQuotaMB: &api.Quota{Guaranteed: 1024, Limit: 4096},
			Budget: &api.Budget{Period: api.BudgetWeek, Hard: 200}}},
		UsageGPUHours: 812.25,
		GPUsInUse:     map[string]int{"H100": 24},
	}
}

// storedTeam returns tm without the fields the API fills in from the live state.
func storedTeam(tm api.Team) api.Team {
	tm.UsageGPUHours, tm.GPUsInUse = 0, nil
	return tm
}

// fullReservation sets every stored field, though a reservation by GPU count (Model,
// Pool) has no Nodes.
func fullReservation(id int64) api.Reservation {
	return api.Reservation{
		ID: id, Name: "neurips-push", Team: "vision", GPUs: 16, Nodes: []string{"gpu-01", "gpu-02"},
		Model: "H100", Pool: "train", Start: t0.Add(24 * time.Hour), End: t0.Add(72 * time.Hour),
	}
}

// withUse adds to r the fields the API fills in from the live state, which are not stored.
func withUse(r api.Reservation) api.Reservation {
	r.Used, r.Held = 3, 5
	return r
}

func fullEvent(jobID int64) api.Event {
	return api.Event{
		ID:   999, // the store assigns IDs; a caller's is overwritten
		Time: t0.Add(7 * time.Second), Actor: "scheduler", Kind: api.EventTransition,
		JobID: jobID, Attempt: 2, Node: "gpu-01", From: api.StateRunning, To: api.StatePending,
		Reason: api.ReasonPreempted, Message: "preempted by job 9",
		Role: "admin", Source: "10.0.0.9:40112",
		Before: json.RawMessage(`{"tier":1}`), After: json.RawMessage(`{"tier":2}`),
	}
}

// checkAllSet fails t if any exported field of v, at any depth, is zero, so that a field
// added to the api types later cannot slip through the round trip untested.
func checkAllSet(t *testing.T, name string, v any) {
	t.Helper()
	if zero := zeroFields(reflect.ValueOf(v), name); len(zero) > 0 {
		t.Fatalf("fixture leaves fields zero, so the round trip would not test them: %s", strings.Join(zero, ", "))
	}
}

func zeroFields(v reflect.Value, path string) []string {
	if tm, ok := v.Interface().(time.Time); ok {
		if tm.IsZero() {
			return []string{path}
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		var zero []string
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				zero = append(zero, zeroFields(v.Field(i), path+"."+f.Name)...)
			}
		}
		return zero
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return []string{path}
		}
		var zero []string
		if v.Kind() == reflect.Slice {
			for i := range v.Len() {
				zero = append(zero, zeroFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
		return zero
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

func testEmptyLoad(t *testing.T, url string) {
	s := openStore(t, url)
	c := load(t, s)
	if len(c.Jobs)+len(c.Attempts)+len(c.Nodes)+len(c.Queues)+len(c.Teams)+len(c.Reservations)+len(c.Events) != 0 {
		t.Errorf("new store is not empty: %+v", c)
	}
	if err := s.Commit(context.Background(), &Batch{}); err != nil {
		t.Errorf("Commit of an empty batch: %v", err)
	}
}

func testRoundTrip(t *testing.T, url string) {
	checkAllSet(t, "Job", fullJob(7))
	checkAllSet(t, "Attempt", fullAttempt(7, 2))
	checkAllSet(t, "Node", fullNode("gpu-01"))
	checkAllSet(t, "Queue", fullQueue("train"))
	checkAllSet(t, "Team", fullTeam("vision"))
	checkAllSet(t, "Reservation", withUse(fullReservation(4)))
	checkAllSet(t, "Event", fullEvent(7))

	s := openStore(t, url)
	retriesZero := bareJob(5)
	retriesZero.Spec.Retries = ptr(0) // an explicit "never retry" must not come back as nil
	succeeded := fullAttempt(3, 1)
	succeeded.ExitCode = ptr(0) // exit code 0 must not come back as nil
	bareEvent := api.Event{Time: t0, Actor: "root", Kind: api.EventAdmin}
	bareTeam := api.Team{Name: "nlp"}
	bareReservation := api.Reservation{ID: 11, Team: "nlp"}
	// Rows are given out of order to check that loads sort them.
	b := &Batch{
		Jobs:         []api.Job{fullJob(7), bareJob(3), retriesZero},
		Attempts:     []api.Attempt{fullAttempt(7, 2), bareAttempt(7, 1), succeeded},
		Nodes:        []api.Node{fullNode("gpu-02"), fullNode("gpu-01")},
		Queues:       []api.Queue{fullQueue("train"), fullQueue("batch")},
		Teams:        []api.Team{fullTeam("vision"), bareTeam},
		Reservations: []api.Reservation{bareReservation, withUse(fullReservation(4))},
		Events:       []api.Event{fullEvent(7), bareEvent},
	}
	commit(t, s, b)

	if b.Events[0].ID <= 0 || b.Events[1].ID <= b.Events[0].ID {
		t.Fatalf("Commit assigned event IDs %v, want positive and increasing", eventIDs(b.Events))
	}
	wantEvents := []api.Event{fullEvent(7), bareEvent}
	for i := range wantEvents {
		wantEvents[i].ID = b.Events[i].ID
	}
	got := load(t, s)
	equal(t, "jobs", got.Jobs, []api.Job{bareJob(3), retriesZero, storedJob(fullJob(7))})
	equal(t, "attempts", got.Attempts, []api.Attempt{succeeded, bareAttempt(7, 1), fullAttempt(7, 2)})
	equal(t, "nodes", got.Nodes, []api.Node{storedNode(fullNode("gpu-01")), storedNode(fullNode("gpu-02"))})
	equal(t, "queues", got.Queues, []api.Queue{fullQueue("batch"), fullQueue("train")})
	equal(t, "teams", got.Teams, []api.Team{bareTeam, storedTeam(fullTeam("vision"))})
	equal(t, "reservations", got.Reservations, []api.Reservation{fullReservation(4), bareReservation})
	equal(t, "events", got.Events, wantEvents)
}

func testTimesInUTC(t *testing.T, url string) {
	s := openStore(t, url)
	tokyo := time.FixedZone("JST", 9*3600)
	local := t0.In(tokyo)
	j := bareJob(1)
	j.SubmitTime = local
	j.StartTime = ptr(local)
	j.LastCheckpoint = ptr(local)
	a := bareAttempt(1, 1)
	a.AssignTime = local
	a.EndTime = ptr(local)
	n := fullNode("gpu-01")
	n.LastHeartbeat = local
	e := api.Event{Time: local, Actor: "a", Kind: api.EventSubmit, JobID: 1}
	r := api.Reservation{ID: 1, Team: "vision", Start: local, End: local}
	zeroTime := api.Event{Actor: "a", Kind: api.EventAdmin}
	commit(t, s, &Batch{Jobs: []api.Job{j}, Attempts: []api.Attempt{a}, Nodes: []api.Node{n},
		Reservations: []api.Reservation{r}, Events: []api.Event{e, zeroTime}})
	if j.SubmitTime.Location() != tokyo || *j.StartTime != local || *j.LastCheckpoint != local {
		t.Errorf("Commit changed the caller's job times")
	}

	got := load(t, s)
	for name, tm := range map[string]time.Time{
		"job submit": got.Jobs[0].SubmitTime, "job start": *got.Jobs[0].StartTime,
		"job checkpoint":    *got.Jobs[0].LastCheckpoint,
		"reservation start": got.Reservations[0].Start, "reservation end": got.Reservations[0].End,
		"attempt assign": got.Attempts[0].AssignTime, "attempt end": *got.Attempts[0].EndTime,
		"node heartbeat": got.Nodes[0].LastHeartbeat, "event": got.Events[0].Time,
	} {
		if !tm.Equal(t0) || tm.Location() != time.UTC {
			t.Errorf("%s time: got %v, want %v in UTC", name, tm, t0)
		}
	}
	if !got.Events[1].Time.IsZero() {
		t.Errorf("zero event time came back as %v", got.Events[1].Time)
	}
}

func testUpsertReplaces(t *testing.T, url string) {
	s := openStore(t, url)
	commit(t, s, &Batch{
		Jobs:         []api.Job{fullJob(1), bareJob(2)},
		Attempts:     []api.Attempt{fullAttempt(1, 1)},
		Nodes:        []api.Node{fullNode("gpu-01")},
		Queues:       []api.Queue{fullQueue("train")},
		Teams:        []api.Team{fullTeam("vision")},
		Reservations: []api.Reservation{fullReservation(1)},
	})

	// The replacements clear every pointer the originals set: an upsert replaces the row,
	// it does not merge into it.
	job := bareJob(1)
	job.State = api.StateSucceeded
	job.Spec.Queue, job.Spec.Team, job.Spec.User, job.Spec.Name = "urgent", "speech", "cy", "asr"
	attempt := bareAttempt(1, 1)
	attempt.State = api.StateSucceeded
	node := fullNode("gpu-01")
	node.State = api.NodeReady
	node.Inventory.GPUs = nil
	node.LastHeartbeat = t0.Add(time.Hour)
	queue := api.Queue{Name: "train", Tier: 5}
	team := api.Team{Name: "vision", Weight: 2}
	reservation := api.Reservation{ID: 1, Team: "speech", Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour)}
	// A batch may carry the same key twice; the last one wins, as if applied in order.
	first := fullJob(2)
	first.State = api.StateAssigned
	second := fullJob(2)
	second.State = api.StateRunning
	commit(t, s, &Batch{
		Jobs:         []api.Job{job, first, second},
		Attempts:     []api.Attempt{fullAttempt(1, 1), attempt},
		Nodes:        []api.Node{node},
		Queues:       []api.Queue{fullQueue("train"), queue},
		Teams:        []api.Team{fullTeam("vision"), team},
		Reservations: []api.Reservation{fullReservation(1), reservation},
	})

	got := load(t, s)
	equal(t, "jobs", got.Jobs, []api.Job{job, storedJob(second)})
	equal(t, "attempts", got.Attempts, []api.Attempt{attempt})
	equal(t, "nodes", got.Nodes, []api.Node{storedNode(node)})
	equal(t, "queues", got.Queues, []api.Queue{queue})
	equal(t, "teams", got.Teams, []api.Team{team})
	equal(t, "reservations", got.Reservations, []api.Reservation{reservation})

	// The indexed columns must follow the JSON they copy, or queries on them would lie.
	var state, queueName, teamName, user, name, submit string
	row := s.(*sqlStore).read.QueryRowContext(context.Background(),
		"SELECT state, queue, team, user_name, name, submit_time FROM jobs WHERE id = 1")
	if err := row.Scan(&state, &queueName, &teamName, &user, &name, &submit); err != nil {
		t.Fatalf("read job columns: %v", err)
	}
	equal(t, "job columns", []string{state, queueName, teamName, user, name, submit},
		[]string{"SUCCEEDED", "urgent", "speech", "cy", "asr", formatTime(job.SubmitTime)})
	var resTeam, start, end string
	row = s.(*sqlStore).read.QueryRowContext(context.Background(),
		"SELECT team, start_time, end_time FROM reservations WHERE id = 1")
	if err := row.Scan(&resTeam, &start, &end); err != nil {
		t.Fatalf("read reservation columns: %v", err)
	}
	equal(t, "reservation columns", []string{resTeam, start, end},
		[]string{"speech", formatTime(reservation.Start), formatTime(reservation.End)})
}

func testDeletes(t *testing.T, url string) {
	s := openStore(t, url)
	commit(t, s, &Batch{
		Queues:       []api.Queue{fullQueue("batch"), fullQueue("train")},
		Teams:        []api.Team{fullTeam("nlp"), fullTeam("vision")},
		Reservations: []api.Reservation{fullReservation(1), fullReservation(2)},
	})

	// One batch deletes a row of each kind, keys that exist nowhere, and keys it also
	// upserts (one stored before, one new), alongside other changes.
	commit(t, s, &Batch{
		Jobs:               []api.Job{bareJob(1)},
		Queues:             []api.Queue{fullQueue("train"), fullQueue("new")},
		Teams:              []api.Team{fullTeam("vision"), fullTeam("new")},
		Reservations:       []api.Reservation{fullReservation(2), fullReservation(3)},
		DeleteQueues:       []string{"batch", "train", "new", "missing"},
		DeleteTeams:        []string{"nlp", "vision", "new", "missing"},
		DeleteReservations: []int64{1, 2, 3, 404},
		Events:             []api.Event{fullEvent(1)},
	})
	got := load(t, s)
	if len(got.Queues)+len(got.Teams)+len(got.Reservations) != 0 {
		t.Errorf("after deleting every key: queues %+v, teams %+v, reservations %+v",
			got.Queues, got.Teams, got.Reservations)
	}
	if len(got.Jobs) != 1 || len(got.Events) != 1 {
		t.Errorf("the batch's other changes: %d jobs and %d events, want 1 and 1", len(got.Jobs), len(got.Events))
	}

	// A batch that only deletes is not empty, and leaves the other keys alone.
	commit(t, s, &Batch{
		Queues:       []api.Queue{fullQueue("batch"), fullQueue("train")},
		Teams:        []api.Team{fullTeam("nlp"), fullTeam("vision")},
		Reservations: []api.Reservation{fullReservation(1), fullReservation(2)},
	})
	for _, b := range []*Batch{{DeleteQueues: []string{"batch"}}, {DeleteTeams: []string{"nlp"}}, {DeleteReservations: []int64{1}}} {
		if b.Empty() {
			t.Errorf("Batch %+v reports itself empty", b)
		}
		commit(t, s, b)
	}
	got = load(t, s)
	equal(t, "queues", got.Queues, []api.Queue{fullQueue("train")})
	equal(t, "teams", got.Teams, []api.Team{storedTeam(fullTeam("vision"))})
	equal(t, "reservations", got.Reservations, []api.Reservation{fullReservation(2)})
}

func testEvents(t *testing.T, url string) {
	s := openStore(t, url)
	first := &Batch{Jobs: []api.Job{bareJob(1), bareJob(2)}, Events: []api.Event{fullEvent(1), fullEvent(1), fullEvent(2)}}
	commit(t, s, first)
	second := &Batch{Events: []api.Event{fullEvent(2), {Time: t0, Actor: "op", Kind: api.EventNode, Node: "gpu-01"}}}
	commit(t, s, second)

	all := append(append([]api.Event{}, first.Events...), second.Events...)
	ids := eventIDs(all)
	for i := range ids {
		if ids[i] <= 0 || (i > 0 && ids[i] <= ids[i-1]) {
			t.Fatalf("event IDs %v: want positive and increasing in commit order", ids)
		}
	}
	equal(t, "all events", events(t, s, EventFilter{}), all)

	pick := func(idx ...int) []int64 {
		out := make([]int64, len(idx))
		for i, k := range idx {
			out[i] = ids[k]
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    EventFilter
		want []int64
	}{
		{"job 1", EventFilter{JobID: 1}, pick(0, 1)},
		{"job 2", EventFilter{JobID: 2}, pick(2, 3)},
		{"unknown job", EventFilter{JobID: 99}, pick()},
		{"after", EventFilter{AfterID: ids[1]}, pick(2, 3, 4)},
		{"after last", EventFilter{AfterID: ids[4]}, pick()},
		{"limit", EventFilter{Limit: 2}, pick(0, 1)},
		{"job, after and limit", EventFilter{JobID: 2, AfterID: ids[2], Limit: 1}, pick(3)},
		{"limit above count", EventFilter{JobID: 1, Limit: 10}, pick(0, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			equal(t, "event IDs", eventIDs(events(t, s, tc.f)), tc.want)
		})
	}
	if _, err := s.Events(context.Background(), EventFilter{Limit: -1}); err == nil {
		t.Errorf("Events with a negative limit: want an error")
	}
}

func testFailedCommit(t *testing.T, url string) {
	s := openStore(t, url)
	commit(t, s, &Batch{
		Jobs:         []api.Job{bareJob(1)},
		Queues:       []api.Queue{fullQueue("batch")},
		Teams:        []api.Team{fullTeam("nlp")},
		Reservations: []api.Reservation{fullReservation(1)},
		Events:       []api.Event{fullEvent(1)},
	})
	before := load(t, s)

	// The attempt names a job that exists nowhere, which the foreign key rejects; it comes
	// after a valid job, node, queue, team, reservation, deletes and event so that they
	// would be written first.
	bad := &Batch{
		Jobs:               []api.Job{bareJob(2)},
		Attempts:           []api.Attempt{bareAttempt(404, 1)},
		Nodes:              []api.Node{fullNode("gpu-01")},
		Queues:             []api.Queue{fullQueue("train")},
		Teams:              []api.Team{fullTeam("vision")},
		Reservations:       []api.Reservation{fullReservation(2)},
		DeleteQueues:       []string{"batch"},
		DeleteTeams:        []string{"nlp"},
		DeleteReservations: []int64{1},
		Events:             []api.Event{fullEvent(2)},
	}
	if err := s.Commit(context.Background(), bad); err == nil {
		t.Fatalf("Commit of an attempt for a missing job: want an error")
	}
	if bad.Events[0].ID != 999 {
		t.Errorf("failed Commit changed the event's ID to %d", bad.Events[0].ID)
	}
	equal(t, "contents after a failed commit", load(t, s), before)

	// The store is still usable, and the failed batch used up nothing.
	next := &Batch{Events: []api.Event{fullEvent(1)}}
	commit(t, s, next)
	if next.Events[0].ID <= before.Events[0].ID {
		t.Errorf("event after a failed commit got ID %d, not above %d", next.Events[0].ID, before.Events[0].ID)
	}
}

func testCancelledCommit(t *testing.T, url string) {
	s := openStore(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := &Batch{Jobs: []api.Job{bareJob(1)}, Events: []api.Event{fullEvent(1)}}
	if err := s.Commit(ctx, b); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a cancelled context: got %v, want context.Canceled", err)
	}
	if c := load(t, s); len(c.Jobs) != 0 || len(c.Events) != 0 {
		t.Errorf("cancelled Commit wrote %d jobs and %d events", len(c.Jobs), len(c.Events))
	}
}

func testReopen(t *testing.T, url string) {
	s := openStore(t, url)
	b := &Batch{
		Jobs:         []api.Job{fullJob(1), bareJob(2)},
		Attempts:     []api.Attempt{fullAttempt(1, 1)},
		Nodes:        []api.Node{fullNode("gpu-01")},
		Queues:       []api.Queue{fullQueue("train")},
		Teams:        []api.Team{fullTeam("vision")},
		Reservations: []api.Reservation{fullReservation(1)},
		Events:       []api.Event{fullEvent(1), fullEvent(2)},
	}
	commit(t, s, b)
	before := load(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = openStore(t, url)
	equal(t, "contents after reopening", load(t, s), before)
	// Event IDs keep rising across a restart: a reader resuming from its last ID must
	// not miss or see again any event.
	after := &Batch{Events: []api.Event{fullEvent(1)}}
	commit(t, s, after)
	if after.Events[0].ID <= b.Events[1].ID {
		t.Errorf("event committed after reopening got ID %d, not above %d", after.Events[0].ID, b.Events[1].ID)
	}
}

func testMigrationsIdempotent(t *testing.T, url string) {
	for range 3 {
		s, err := Open(context.Background(), url, testLogger(t))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t, url)
	var rows, newest int
	err = s.(*sqlStore).read.QueryRowContext(context.Background(),
		"SELECT COUNT(*), MAX(version) FROM schema_migrations").Scan(&rows, &newest)
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	if rows != len(ms) || newest != len(ms) {
		t.Errorf("schema_migrations holds %d rows up to version %d, want %d up to %d", rows, newest, len(ms), len(ms))
	}
}

// testMigrateFromVersion1 builds a database as the first release left it, with only
// migration 1 applied and rows written, and checks that Open brings it up to date with
// the rows intact.
func testMigrateFromVersion1(t *testing.T, url string) {
	ctx := context.Background()
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	db, d := openRaw(t, url)
	if err := applyMigrations(ctx, db, d, testLogger(t), ms[:1]); err != nil {
		t.Fatalf("apply migration 1: %v", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	job, queue := bareJob(1), api.Queue{Name: "train", Tier: 1, Grace: 30}
	stmts := &stmtCache{db: db, d: d}
	w := writeTx{tx, stmts}
	// The jobs table of version 1 lacks end_time, the last column.
	v1Jobs := jobsTable
	v1Jobs.cols = jobsTable.cols[:len(jobsTable.cols)-1]
	appendV1Job := func(args []any, j *api.Job) ([]any, error) {
		args, err := appendJob(args, j)
		return args[:len(args)-1], err
	}
	if err := insert(ctx, w, v1Jobs, []api.Job{job}, appendV1Job); err != nil {
		t.Fatal(err)
	}
	if err := insert(ctx, w, queuesTable, []api.Queue{queue}, appendQueue); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := stmts.close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openStore(t, url)
	got := load(t, s)
	equal(t, "jobs from version 1", got.Jobs, []api.Job{job})
	equal(t, "queues from version 1", got.Queues, []api.Queue{queue})
	var newest int
	if err := s.(*sqlStore).read.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&newest); err != nil {
		t.Fatalf("read schema version: %v", err)
	}
	if newest != len(ms) {
		t.Errorf("schema version %d after Open, want %d", newest, len(ms))
	}
	commit(t, s, &Batch{Teams: []api.Team{fullTeam("vision")}, Reservations: []api.Reservation{fullReservation(1)}})
	got = load(t, s)
	equal(t, "teams", got.Teams, []api.Team{storedTeam(fullTeam("vision"))})
	equal(t, "reservations", got.Reservations, []api.Reservation{fullReservation(1)})
}

// openRaw opens url without migrating it, as Open would for the backend.
func openRaw(t *testing.T, url string) (*sql.DB, dialect) {
	t.Helper()
	var (
		db  *sql.DB
		d   dialect
		err error
	)
	if path, ok := strings.CutPrefix(url, "sqlite://"); ok {
		db, err = openSQLitePool(path, neturl.Values{"_txlock": {"immediate"}})
		d = sqliteDialect
	} else {
		db, err = sql.Open("pgx", url)
		d = postgresDialect
	}
	if err != nil {
		t.Fatalf("open %s: %v", redact(url), err)
	}
	return db, d
}

func testNewerSchemaRefused(t *testing.T, url string) {
	s := openStore(t, url)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.(*sqlStore).write.ExecContext(context.Background(),
		"INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", len(ms)+1, formatTime(t0))
	if err != nil {
		t.Fatalf("record a future migration: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s, err := Open(context.Background(), url, testLogger(t)); err == nil {
		s.Close()
		t.Fatalf("Open of a database with a newer schema: want an error")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open of a database with a newer schema: error %q does not say so", err)
	}
}

func testConcurrentCommits(t *testing.T, url string) {
	// Two stores on one PostgreSQL database stand in for two processes (servers, or a server
	// and a restarted one), so the lock between processes is exercised as well as the one
	// within. A SQLite file serves one store at a time (see TestSQLiteSecondOpenRefused),
	// so there one store takes all the writers.
	stores := []Store{openStore(t, url)}
	if !strings.HasPrefix(url, "sqlite://") {
		stores = append(stores, openStore(t, url))
	}
	s := stores[0]
	const writers, perWriter = 8, 20
	ids := make([][]int64, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				id := int64(w*1000 + i + 1)
				b := &Batch{Jobs: []api.Job{bareJob(id)}, Attempts: []api.Attempt{bareAttempt(id, 1)},
					Events: []api.Event{fullEvent(id)}}
				if err := stores[w%len(stores)].Commit(context.Background(), b); err != nil {
					t.Errorf("writer %d: Commit: %v", w, err)
					return
				}
				ids[w] = append(ids[w], b.Events[0].ID)
			}
		})
	}
	// Readers run alongside the writers and must never see an error such as SQLITE_BUSY.
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.LoadJobs(context.Background()); err != nil {
					t.Errorf("LoadJobs during commits: %v", err)
					return
				}
				if _, err := s.Events(context.Background(), EventFilter{Limit: 10}); err != nil {
					t.Errorf("Events during commits: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	if t.Failed() {
		return
	}

	seen := map[int64]bool{}
	for w, got := range ids {
		for i, id := range got {
			if i > 0 && id <= got[i-1] {
				t.Errorf("writer %d: event IDs %v not increasing in commit order", w, got)
			}
			if seen[id] {
				t.Errorf("event ID %d assigned twice", id)
			}
			seen[id] = true
		}
	}
	c := load(t, s)
	if len(c.Jobs) != writers*perWriter || len(c.Attempts) != writers*perWriter || len(c.Events) != writers*perWriter {
		t.Errorf("after %d commits: %d jobs, %d attempts, %d events", writers*perWriter,
			len(c.Jobs), len(c.Attempts), len(c.Events))
	}
	for _, e := range c.Events {
		if !seen[e.ID] {
			t.Errorf("stored event %d was not reported to any writer", e.ID)
		}
	}
}

func testBigBatch(t *testing.T, url string) {
	s := openStore(t, url)
	const n = 2500
	b := &Batch{}
	for i := range n {
		id := int64(i + 1)
		b.Jobs = append(b.Jobs, fullJob(id))
		b.Attempts = append(b.Attempts, fullAttempt(id, 1))
		b.Events = append(b.Events, fullEvent(id))
		if i%10 == 0 {
			b.Nodes = append(b.Nodes, fullNode(fmt.Sprintf("gpu-%04d", i)))
		}
	}
	commit(t, s, b)
	for i := 1; i < n; i++ {
		if b.Events[i].ID <= b.Events[i-1].ID {
			t.Fatalf("event %d got ID %d after %d", i, b.Events[i].ID, b.Events[i-1].ID)
		}
	}
	c := load(t, s)
	if len(c.Jobs) != n || len(c.Attempts) != n || len(c.Events) != n || len(c.Nodes) != n/10 {
		t.Fatalf("stored %d jobs, %d attempts, %d events, %d nodes; want %d, %d, %d, %d",
			len(c.Jobs), len(c.Attempts), len(c.Events), len(c.Nodes), n, n, n, n/10)
	}
	equal(t, "job 1777", c.Jobs[1776], storedJob(fullJob(1777)))
	equal(t, "last event", c.Events[n-1], b.Events[n-1])
}

// killChildEnv, when set to a store URL, makes the test binary commit one batch to that
// store, report it, and wait to be killed (see TestMain).
const killChildEnv = "ROTA_STORE_KILL_CHILD_URL"

const killChildJob = 42

// runKillChild is the child process of testSurvivesKill.
func runKillChild(url string) int {
	s, err := Open(context.Background(), url, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b := &Batch{Jobs: []api.Job{fullJob(killChildJob)}, Events: []api.Event{fullEvent(killChildJob)}}
	if err := s.Commit(context.Background(), b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("committed")
	// Sleep rather than block forever, which the runtime would report as a deadlock.
	time.Sleep(time.Hour)
	return 0
}

// testSurvivesKill checks that a Commit that returned survives kill -9 of the process.
func testSurvivesKill(t *testing.T, url string) {
	// The deadline only stops a child that hangs; nothing here depends on how long it takes.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill child: %v", err)
	}
	_ = cmd.Wait() // it was killed; its exit status says only that
	if line != "committed\n" {
		t.Fatalf("child did not commit: stdout %q, stderr:\n%s", line, stderr.String())
	}

	c := load(t, openStore(t, url))
	want := fullEvent(killChildJob)
	if len(c.Jobs) != 1 || len(c.Events) != 1 {
		t.Fatalf("after kill -9: %d jobs and %d events, want 1 and 1", len(c.Jobs), len(c.Events))
	}
	equal(t, "job", c.Jobs[0], storedJob(fullJob(killChildJob)))
	want.ID = c.Events[0].ID
	equal(t, "event", c.Events[0], want)
}

func testIdentity(t *testing.T, url string) {
	user := api.User{Name: "ada", Role: "admin", UnixUser: "ada2", AllowRoot: true, Created: t0, Teams: []string{"vision"},
		Notify: []api.Notify{{URL: "https://hooks.example.com/ada", Events: []string{api.NotifyStarted}}}}
	tok := TokenRecord{TokenInfo: api.TokenInfo{ID: "abcd1234", User: "ada", Description: "laptop", Created: t0,
		Expires: ptr(t0.Add(time.Hour)), Revoked: ptr(t0.Add(time.Minute)), LastUsed: ptr(t0.Add(time.Second))}, Hash: "ff00"}
	join := JoinTokenRecord{JoinTokenInfo: api.JoinTokenInfo{ID: "j1", Created: t0, Expires: t0.Add(time.Hour), Uses: 3, Used: 1, Node: "gpu-01"}, Hash: "aa11"}
	cert := NodeCert{Node: "gpu-01", Serial: "0a0b", Issued: t0, NotAfter: t0.Add(365 * 24 * time.Hour), JoinToken: "j1"}
	idem := IdempotencyRecord{User: "ada", Key: "k-1", Hash: "beef", JobID: 7, Created: t0}
	checkAllSet(t, "User", user)
	checkAllSet(t, "TokenRecord", tok)
	checkAllSet(t, "JoinTokenRecord", join)
	checkAllSet(t, "NodeCert", cert)
	checkAllSet(t, "IdempotencyRecord", idem)

	s := openStore(t, url)
	old := idem
	old.Key, old.Created = "k-old", t0.Add(-48*time.Hour)
	commit(t, s, &Batch{
		Settings:    []Setting{{Name: "cluster", Data: json.RawMessage(`{"id":"0123456789abcdef"}`)}, {Name: "limits", Data: json.RawMessage(`{}`)}},
		Users:       []api.User{user, {Name: "bob", Role: "member", Created: t0}},
		Tokens:      []TokenRecord{tok},
		JoinTokens:  []JoinTokenRecord{join},
		NodeCerts:   []NodeCert{cert},
		Idempotency: []IdempotencyRecord{idem, old},
	})
	ctx := context.Background()
	settings, err := s.LoadSettings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "settings", string(settings["cluster"]), `{"id":"0123456789abcdef"}`)
	users, err := s.LoadUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored := user
	stored.Teams = nil // filled in by the API from team membership
	equal(t, "users", users, []api.User{stored, {Name: "bob", Role: "member", Created: t0}})
	tokens, err := s.LoadTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "tokens", tokens, []TokenRecord{tok})
	joins, err := s.LoadJoinTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "join tokens", joins, []JoinTokenRecord{join})
	certs, err := s.LoadNodeCerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "node certs", certs, []NodeCert{cert})
	recent, err := s.LoadIdempotency(ctx, t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "recent idempotency keys", recent, []IdempotencyRecord{idem})

	// A second record for a stored key is refused, and the whole batch with it.
	dup := idem
	dup.JobID = 8
	if err := s.Commit(ctx, &Batch{Jobs: []api.Job{bareJob(8)}, Idempotency: []IdempotencyRecord{dup}}); err == nil {
		t.Fatal("Commit stored a second record for one idempotency key")
	}
	if jobs, _ := s.LoadJobs(ctx); len(jobs) != 0 {
		t.Errorf("the refused batch left %d jobs", len(jobs))
	}

	// Pruning drops old keys only; a token revoked in place stays revoked; a user goes.
	tok.Revoked = ptr(t0.Add(2 * time.Hour))
	b := &Batch{PruneIdempotency: t0.Add(-time.Hour), Tokens: []TokenRecord{tok}, DeleteUsers: []string{"bob"}}
	if b.Empty() {
		t.Fatal("a batch that only prunes, revokes and deletes reports itself empty")
	}
	commit(t, s, b)
	all, err := s.LoadIdempotency(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "idempotency keys after pruning", all, []IdempotencyRecord{idem})
	tokens, _ = s.LoadTokens(ctx)
	equal(t, "revoked token", tokens, []TokenRecord{tok})
	users, _ = s.LoadUsers(ctx)
	equal(t, "users after delete", users, []api.User{stored})

	// A token forgotten is gone; the others stay.
	other := tok
	other.ID, other.Hash, other.Revoked = "efgh5678", "ee11", nil
	commit(t, s, &Batch{Tokens: []TokenRecord{other}})
	b = &Batch{DeleteTokens: []string{tok.ID, "no-such-token"}}
	if b.Empty() {
		t.Fatal("a batch that only forgets a token reports itself empty")
	}
	commit(t, s, b)
	tokens, _ = s.LoadTokens(ctx)
	equal(t, "tokens after one is forgotten", tokens, []TokenRecord{other})
}

func testAuditFilters(t *testing.T, url string) {
	s := openStore(t, url)
	ev := func(sec int, actor, kind string) api.Event {
		return api.Event{Time: t0.Add(time.Duration(sec) * time.Second), Actor: actor, Kind: kind, Role: "admin", Source: "@unix"}
	}
	b := &Batch{Events: []api.Event{ev(0, "ada", api.EventQueue), ev(10, "bob", api.EventSubmit), ev(20, "ada", api.EventToken), ev(30, "ada", api.EventQueue)}}
	commit(t, s, b)
	ids := eventIDs(b.Events)
	for _, tc := range []struct {
		name string
		f    EventFilter
		want []int64
	}{
		{"actor", EventFilter{Actor: "ada"}, []int64{ids[0], ids[2], ids[3]}},
		{"kind", EventFilter{Kind: api.EventQueue}, []int64{ids[0], ids[3]}},
		{"since", EventFilter{Since: t0.Add(10 * time.Second)}, []int64{ids[1], ids[2], ids[3]}},
		{"until", EventFilter{Until: t0.Add(20 * time.Second)}, []int64{ids[0], ids[1]}},
		{"all together", EventFilter{Actor: "ada", Kind: api.EventQueue, Since: t0.Add(time.Second), Until: t0.Add(time.Hour)}, []int64{ids[3]}},
	} {
		t.Run(tc.name, func(t *testing.T) { equal(t, "event IDs", eventIDs(events(t, s, tc.f)), tc.want) })
	}
}

func testDeleteNodes(t *testing.T, url string) {
	s := openStore(t, url)
	commit(t, s, &Batch{Nodes: []api.Node{fullNode("gpu-01"), fullNode("gpu-02")},
		NodeCerts: []NodeCert{{Node: "gpu-01", Serial: "01", Issued: t0, NotAfter: t0}, {Node: "gpu-02", Serial: "02", Issued: t0, NotAfter: t0}}})
	commit(t, s, &Batch{DeleteNodes: []string{"gpu-01", "missing"}})
	got := load(t, s)
	equal(t, "nodes", got.Nodes, []api.Node{storedNode(fullNode("gpu-02"))})
	certs, err := s.LoadNodeCerts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "certs", certs, []NodeCert{{Node: "gpu-02", Serial: "02", Issued: t0, NotAfter: t0}})
}
