package server

import (
	"reflect"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// TestTaskBufsLendNothingOn decodes heartbeats one after another into the task slice
// handleHeartbeat lends and gives back, and checks each against the same heartbeat
// decoded into a value of its own, and checks that each slice given back is cleared
// whole: it must keep nothing of a heartbeat alive, nor lend anything on.
func TestTaskBufsLendNothingOn(t *testing.T) {
	bodies := []string{
		// Every field a task has, set.
		`{"node":"a","inventory_hash":"h","instance":"i","synced":true,"agent_time":"2026-01-01T00:00:00Z","tasks":[` +
			`{"job_id":1,"attempt":2,"state":"FAILED","pid":7,"start_time":"2026-01-01T00:00:00Z","end_time":"2026-01-01T00:01:00Z","exit_code":3,` +
			`"reason":"exit_code","message":"exited 3","events":[{"kind":"checkpoint"}],"peak_memory_mb":9,"image_digest":"sha256:x"},` +
			`{"job_id":2,"attempt":1,"state":"RUNNING","pid":8},{"job_id":3,"attempt":1,"state":"RUNNING"}]}`,
		// Fewer tasks, with fewer fields, in the slots the first filled.
		`{"node":"b","inventory_hash":"h","instance":"j","synced":true,"agent_time":"2026-01-01T00:00:00Z","tasks":[{"job_id":4,"attempt":1,"state":"RUNNING"}]}`,
		// None.
		`{"node":"c","inventory_hash":"h","instance":"k","synced":true,"agent_time":"2026-01-01T00:00:00Z","tasks":[]}`,
		`{"node":"c","inventory_hash":"h","instance":"k","synced":true,"agent_time":"2026-01-01T00:00:00Z","tasks":null}`,
		// Left out, and refused or not as a heartbeat of its own would be.
		`{"node":"d","inventory_hash":"h","instance":"l","synced":true,"agent_time":"2026-01-01T00:00:00Z"}`,
		// One encoding/json decides on (a name in another case), after a lent slice.
		`{"node":"e","inventory_hash":"h","instance":"m","synced":true,"agent_time":"2026-01-01T00:00:00Z","Tasks":[{"job_id":5,"attempt":1,"state":"RUNNING"}]}`,
		`{"node":"f","inventory_hash":"h","instance":"n","synced":true,"agent_time":"2026-01-01T00:00:00Z","tasks":[{"job_id":6,"attempt":1,"state":"RUNNING","exit_code":0}]}`,
	}
	buf := new([]api.TaskStatus)
	for round := range 2 {
		for i, body := range bodies {
			var lent, own api.Heartbeat
			lent.Tasks = *buf
			status, e := decodeBody([]byte(body), &lent)
			ownStatus, ownE := decodeBody([]byte(body), &own)
			if status != ownStatus || (e == nil) != (ownE == nil) {
				t.Fatalf("round %d, body %d: decoded into a lent slice: %d %v; into its own: %d %v", round, i, status, e, ownStatus, ownE)
			}
			if e == nil && !reflect.DeepEqual(lent.Tasks, own.Tasks) && len(lent.Tasks)+len(own.Tasks) > 0 {
				t.Errorf("round %d, body %d: tasks decoded into a lent slice\n%+v\nwant\n%+v", round, i, lent.Tasks, own.Tasks)
			}
			putTaskBuf(buf, &lent)
			if i == 0 && cap(*buf) < 3 {
				t.Errorf("round %d: the slice given back holds room for %d tasks after a heartbeat of 3: it was not kept", round, cap(*buf))
			}
			if lent.Tasks != nil {
				t.Fatalf("round %d, body %d: the heartbeat still holds the slice it gave back", round, i)
			}
			for k, task := range (*buf)[:cap(*buf)] {
				if !reflect.ValueOf(task).IsZero() {
					t.Fatalf("round %d, body %d: the slice given back holds task %d: %+v", round, i, k, task)
				}
			}
		}
	}
	// A slice grown past maxKeptTasks goes to the collector, not back to the pool.
	big := make([]api.TaskStatus, maxKeptTasks+1)
	kept := new([]api.TaskStatus)
	putTaskBuf(kept, &api.Heartbeat{Tasks: big})
	if *kept != nil {
		t.Errorf("a slice of %d tasks was kept", cap(big))
	}
}
