package server

import (
	"testing"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// A bump wakes the watchers of the nodes it names and no others; bumpAll wakes every
// watcher, including one of a node never bumped, and changes the version each holds.
func TestNodeWatchWakesOnlyItsNode(t *testing.T) {
	var w nodeWatch
	va, ca := w.current("a")
	vb, cb := w.current("b")
	w.bump(&store.Batch{Jobs: []api.Job{{ID: 1, Nodes: []string{"a"}}}})
	if !closed(ca) {
		t.Fatal("the watcher of node a was not woken by a job placed on a")
	}
	if closed(cb) {
		t.Fatal("the watcher of node b was woken by a job placed on a")
	}
	if v, _ := w.current("a"); v == va {
		t.Fatalf("node a's version stayed %d after its bump", v)
	}
	if v, _ := w.current("b"); v != vb {
		t.Fatalf("node b's version moved from %d to %d with no change there", vb, v)
	}
	_, ca = w.current("a")
	w.bumpAll()
	if !closed(ca) || !closed(cb) {
		t.Fatal("bumpAll left a watcher waiting")
	}
	if v, _ := w.current("b"); v == vb {
		t.Fatal("bumpAll did not change the version of a node never bumped: its agent would wait on")
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
