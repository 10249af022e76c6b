package server

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// TestDiskRoom checks the reading of the disk's room: bytes taken are counted until the
// next reading, a write that would cross the line reads the disk again, and the server
// says when it stops and starts taking logs, once each.
func TestDiskRoom(t *testing.T) {
	var free atomic.Int64
	var fail atomic.Bool
	reads := 0
	var logged strings.Builder
	d := &diskRoom{dir: "/data", keep: 1000, log: slog.New(slog.NewTextHandler(&logged, nil)), freeOf: func(string) (int64, error) {
		reads++
		if fail.Load() {
			return 0, errors.New("statfs: input/output error")
		}
		return free.Load(), nil
	}}
	start := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	now := start
	d.now = func() time.Time { return now }
	at := func(after time.Duration) *diskRoom { now = start.Add(after); return d }
	free.Store(1500)
	if e := at(0).take(300); e != nil || reads != 1 {
		t.Fatalf("300 bytes of 500 above the line: %v after %d readings", e, reads)
	}
	if e := at(100 * time.Millisecond).take(100); e != nil || reads != 1 {
		t.Fatalf("100 more within a second: %v after %d readings, want no new reading", e, reads)
	}
	// 100 left above the line as counted: 150 more would cross it, so the disk is read
	// again, and still has 500 above it (the bytes were written to another file system).
	if e := at(200 * time.Millisecond).take(150); e != nil || reads != 2 {
		t.Fatalf("150 more: %v after %d readings, want a new reading and room", e, reads)
	}
	free.Store(1100)
	e := at(2 * time.Second).take(200)
	if e == nil || e.Code != api.CodeDiskFull || !strings.Contains(e.Message, "its data dir /data has 1100 bytes free, and the server keeps 1000 bytes free for its store") {
		t.Fatalf("200 bytes with 100 above the line: %+v, want a refusal naming the room", e)
	}
	if d.problem() == "" || d.heldBack("n1") == "" {
		t.Error("no problem said while logs are refused")
	}
	if e := at(2 * time.Second).take(0); e != nil {
		t.Errorf("an empty chunk (a size query) is refused: %v", e)
	}
	readsShort := reads
	free.Store(5000)
	if e := at(2500 * time.Millisecond).take(200); e == nil || reads != readsShort {
		t.Errorf("room freed within a second of the reading that found none: %v after %d readings, want a refusal and no new reading", e, reads-readsShort)
	}
	if n := strings.Count(logged.String(), "the server's disk is nearly full"); n != 1 {
		t.Errorf("the server said %d times that its disk is nearly full, want once:\n%s", n, logged.String())
	}
	if e := at(3 * time.Second).take(200); e != nil {
		t.Errorf("room freed, a second after the last reading: %v, want the write taken", e)
	}
	if d.problem() != "" || d.heldBack("n1") != "" {
		t.Errorf("a problem is still said with room: %q", d.problem())
	}
	if !strings.Contains(logged.String(), "room again on the server's disk") {
		t.Errorf("the server does not say it takes logs again:\n%s", logged.String())
	}
	// A disk that cannot be read is taken to have room: the write itself says what fails.
	free.Store(0)
	fail.Store(true)
	if e := at(time.Hour).take(200); e != nil {
		t.Errorf("an unreadable disk: %v, want the write let through", e)
	}
	off := &diskRoom{dir: "/data", keep: -1, now: time.Now, freeOf: func(string) (int64, error) { t.Fatal("read with nothing kept"); return 0, nil }}
	if e := off.take(1 << 40); e != nil || off.problem() != "" {
		t.Errorf("with nothing kept: %v, %q", e, off.problem())
	}
}

// TestLogsRefusedForRoom ships log chunks to a server whose disk has less free than it
// keeps: both log routes refuse the bytes with 507, naming the chunk and the node, write
// nothing, and take them once there is room; the status and the log's reader say why.
func TestLogsRefusedForRoom(t *testing.T) {
	h := newHarness(t)
	var free atomic.Int64
	free.Store(DefaultKeepFreeDisk - 1)
	h.srv.room.freeOf = func(string) (int64, error) { return free.Load(), nil }
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.cycle()

	code, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{
		{JobID: j.ID, Attempt: 1, Offset: 0},
		{JobID: j.ID, Attempt: 1, Offset: 0, Data: []byte("line 1\n")},
	}})
	if code != http.StatusOK || len(ans.Chunks) != 2 {
		t.Fatalf("batch: %d with %d answers", code, len(ans.Chunks))
	}
	if c := ans.Chunks[0]; c.Status != 0 || c.Size != 0 {
		t.Errorf("a size query was answered %+v, want size 0", c)
	}
	c := ans.Chunks[1]
	if c.Status != http.StatusInsufficientStorage || c.Error == nil || c.Error.Code != api.CodeDiskFull || c.Error.Field != "chunks[1].data" ||
		!strings.Contains(c.Error.Message, "the server's disk is nearly full") || !strings.Contains(c.Error.Message, "the log waits on node n1 until there is room") {
		t.Errorf("the chunk with bytes was answered %+v (error %+v), want 507 disk_full naming it and the node", c, c.Error)
	}
	if code, body := h.shipOne("n1", j.ID, 1, 0, []byte("line 1\n")); code != http.StatusInsufficientStorage || !strings.Contains(body, "disk_full") {
		t.Errorf("the one-task route answered %d %s, want 507 disk_full", code, body)
	}
	if got, hdr := h.readLog(j.ID, 0, "0"); got != "" || !strings.Contains(hdr.Get("X-Rota-Log-Held"), "what node n1 printed lately waits there until there is room") {
		t.Errorf("the running job's log reads %q with X-Rota-Log-Held %q", got, hdr.Get("X-Rota-Log-Held"))
	}
	var st api.ClusterStatus
	if code := h.do("GET", "/api/v1/status", nil, &st); code != http.StatusOK || len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "job logs wait on their nodes") {
		t.Errorf("status %d with problems %q", code, st.Problems)
	}
	if out := h.scrape(); !strings.Contains(out, "\nrota_server_data_dir_free_bytes 1.073741823e+09\n") ||
		!strings.Contains(out, "\nrota_server_data_dir_keep_free_bytes 1.073741824e+09\n") {
		t.Errorf("/metrics lacks the data dir's free and kept bytes")
	}

	free.Store(DefaultKeepFreeDisk + 1<<20)
	h.clock.Add(diskRoomEvery) // read again a second after it found no room
	if _, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: j.ID, Attempt: 1, Data: []byte("line 1\n")}}}); ans.Chunks[0].Status != 0 || ans.Chunks[0].Size != 7 {
		t.Errorf("with room again the chunk was answered %+v", ans.Chunks[0])
	}
	if got, hdr := h.readLog(j.ID, 0, "0"); got != "line 1\n" || hdr.Get("X-Rota-Log-Held") != "" {
		t.Errorf("the log reads %q with X-Rota-Log-Held %q, want the line and no header", got, hdr.Get("X-Rota-Log-Held"))
	}
	st = api.ClusterStatus{}
	if h.do("GET", "/api/v1/status", nil, &st); len(st.Problems) != 0 {
		t.Errorf("problems with room again: %q", st.Problems)
	}
}
