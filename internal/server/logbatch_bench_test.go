package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// BenchmarkShipLogs measures what the server spends on each piece of a task's log: sent
// on its own (the one-task route, which writes it to disk before it answers), or with
// the other tasks' of its node in one batch (the route agents use, which waits for the
// disk only for a log's last piece). A node runs 4 tasks, each printing two progress
// lines; one op ships one piece of each task's log, so ns/op is a node's interval.
func BenchmarkShipLogs(b *testing.B) {
	const tasks = 4
	line := []byte("step 12000 | loss 2.3141 | lr 3.00e-04 | grad_norm 0.871 | tokens/s 412345 | mfu 41.2%\n" +
		"step 12010 | loss 2.3127 | lr 3.00e-04 | grad_norm 0.864 | tokens/s 412901 | mfu 41.3%\n")
	env := benchServer(b)
	benchFill(b, env, 1, tasks, 0)
	node := "bench-00000"
	oneByOne := func(b *testing.B, offset int64) {
		for job := int64(1); job <= tasks; job++ {
			req, _ := http.NewRequest("POST", fmt.Sprintf("http://rota-up/api/v1/agents/%s/logs/%d/1?offset=%d", node, job, offset), bytes.NewReader(line))
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, err := env.agents.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("one-task route: %d", resp.StatusCode)
			}
		}
	}
	batched := func(b *testing.B, offset int64) {
		batch := api.LogBatch{}
		for job := int64(1); job <= tasks; job++ {
			batch.Chunks = append(batch.Chunks, api.LogChunk{JobID: job, Attempt: 1, Offset: offset, Data: line})
		}
		var ans api.LogBatchAnswer
		if err := post(env.agents, "http://rota-up/api/v1/agents/"+node+"/logs", "", batch, &ans); err != nil {
			b.Fatal(err)
		}
		if len(ans.Chunks) != tasks || ans.Chunks[0].Size != offset+int64(len(line)) {
			b.Fatalf("batch answered %+v", ans)
		}
	}
	var offset int64
	for _, c := range []struct {
		name string
		ship func(*testing.B, int64)
	}{{"one-task-route", oneByOne}, {"batch", batched}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				c.ship(b, offset)
				offset += int64(len(line))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/piece")
		})
	}
}
