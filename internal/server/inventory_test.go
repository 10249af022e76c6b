package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// invBeat sends a heartbeat of node n1 with inv (left out when zero) and hash, and
// returns the status, the answer and the error.
func (h *harness) invBeat(inv api.Inventory, hash string) (int, api.HeartbeatResponse, api.Error) {
	h.t.Helper()
	hb := api.Heartbeat{Node: "n1", Inventory: inv, InventoryHash: hash, Tasks: []api.TaskStatus{}, Instance: "agent-n1",
		ClusterID: h.srv.ClusterID(), Synced: true, AgentTime: time.Now().UTC()}
	var resp api.HeartbeatResponse
	var e api.Error
	code := h.do("POST", "/api/v1/agents/n1/heartbeat", hb, &resp)
	if code != http.StatusOK {
		h.do("POST", "/api/v1/agents/n1/heartbeat", hb, &e)
	}
	return code, resp, e
}

func twoGPUs(healthy bool) api.Inventory {
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", Labels: map[string]string{"rack": "r1"}}
	for i := range 2 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: "GPU-n1-" + string(rune('a'+i)), Model: "H100", MemoryMB: 81559, Healthy: healthy || i == 0})
	}
	return inv
}

// An agent leaves its inventory out while the server holds it, and sends it whole when it
// changes; the server keeps what it holds whatever it is told, and refuses to guess one.
func TestHeartbeatInventoryLeftOut(t *testing.T) {
	h := newHarness(t)
	inv := twoGPUs(true)
	want := api.InventoryHash(inv)

	// A node the server has never heard of must send its inventory.
	if code, _, e := h.invBeat(api.Inventory{}, want); code != http.StatusBadRequest || e.Field != "inventory" || !strings.Contains(e.Message, "holds no inventory") {
		t.Fatalf("an unknown node leaving its inventory out: %d %+v; want 400 naming inventory", code, e)
	}
	if _, ok := h.srv.state.Node("n1"); ok {
		t.Fatal("the refused heartbeat registered the node")
	}
	// An agent that does not know hashes: the answer names the hash of what it sent.
	code, resp, e := h.invBeat(inv, "")
	if code != http.StatusOK || resp.InventoryHash != want {
		t.Fatalf("first heartbeat: %d %+v, hash %q; want 200 and %q", code, e, resp.InventoryHash, want)
	}
	// Left out, with that hash: the node keeps its inventory.
	for range 2 {
		code, resp, e = h.invBeat(api.Inventory{}, want)
		if code != http.StatusOK || resp.InventoryHash != want {
			t.Fatalf("heartbeat without the inventory: %d %+v, hash %q; want 200 and %q", code, e, resp.InventoryHash, want)
		}
	}
	n, _ := h.srv.state.Node("n1")
	if len(n.GPUs) != 2 || n.Labels["rack"] != "r1" || n.CPUs != 64 || n.State != api.NodeReady {
		t.Fatalf("node after heartbeats without inventory: %d GPUs, labels %v, %d CPUs, %s; want it as registered", len(n.GPUs), n.Labels, n.CPUs, n.State)
	}

	// Left out with another hash (the agent's inventory changed, or the server's records
	// went back): the server keeps what it holds and says which; nothing is guessed.
	code, resp, _ = h.invBeat(api.Inventory{}, strings.Repeat("0", 64))
	if n2, _ := h.srv.state.Node("n1"); code != http.StatusOK || resp.InventoryHash != want || len(n2.GPUs) != 2 {
		t.Fatalf("heartbeat with another hash: %d, hash %q, %d GPUs; want 200, the held %q, the inventory kept", code, resp.InventoryHash, len(n2.GPUs), want)
	}

	// A changed inventory goes whole, and its hash is the new one.
	sick := twoGPUs(false)
	code, resp, _ = h.invBeat(sick, api.InventoryHash(sick))
	if code != http.StatusOK || resp.InventoryHash != api.InventoryHash(sick) || resp.InventoryHash == want {
		t.Fatalf("changed inventory: %d, hash %q; want the new inventory's", code, resp.InventoryHash)
	}
	if n, _ := h.srv.state.Node("n1"); n.GPUs[1].Healthy {
		t.Error("the changed inventory was not recorded")
	}

	// Bad input: no inventory and no hash, a hash that is no SHA-256, an explicit null.
	if code, _, e := h.invBeat(api.Inventory{}, ""); code != http.StatusBadRequest || e.Field != "inventory" {
		t.Errorf("no inventory, no hash: %d %+v; want 400 naming inventory", code, e)
	}
	if code, _, e := h.invBeat(sick, "ABC"); code != http.StatusBadRequest || e.Field != "inventory_hash" {
		t.Errorf("a malformed hash: %d %+v; want 400 naming inventory_hash", code, e)
	}
	raw := `{"node":"n1","inventory":null,"inventory_hash":"` + api.InventoryHash(sick) + `","tasks":[],"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n1","synced":true}`
	resp2, err := h.agent.Post("http://rota-up/api/v1/agents/n1/heartbeat", "application/json", strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var e2 api.Error
	json.NewDecoder(resp2.Body).Decode(&e2)
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusBadRequest || !strings.Contains(e2.Field+e2.Message, "inventory") {
		t.Errorf("inventory null: %d %+v; want 400 naming inventory", resp2.StatusCode, e2)
	}

	// After a restart the server works the hash out from the stored inventory.
	h.restart()
	code, resp, e = h.invBeat(api.Inventory{}, api.InventoryHash(sick))
	if code != http.StatusOK || resp.InventoryHash != api.InventoryHash(sick) {
		t.Fatalf("after a restart: %d %+v, hash %q; want 200 and the stored inventory's hash", code, e, resp.InventoryHash)
	}
	if n, _ := h.srv.state.Node("n1"); len(n.GPUs) != 2 || n.GPUs[1].Healthy {
		t.Errorf("after a restart the node holds %+v; want the stored inventory", n.GPUs)
	}

	// A removed node must send its inventory again.
	if code := h.do("DELETE", "/api/v1/nodes/n1", nil, nil); code/100 != 2 {
		t.Fatalf("remove n1: %d", code)
	}
	if code, _, e := h.invBeat(api.Inventory{}, api.InventoryHash(sick)); code != http.StatusBadRequest || e.Field != "inventory" {
		t.Errorf("a removed node leaving its inventory out: %d %+v; want 400 naming inventory", code, e)
	}
}
