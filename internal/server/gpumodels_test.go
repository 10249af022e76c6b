package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

const (
	a100 = "NVIDIA A100-SXM4-80GB"
	h100 = "NVIDIA H100 80GB HBM3"
	l40s = "NVIDIA L40S"
)

// modelInventory is a node of n GPUs of one model.
func modelInventory(node, model string, n int) api.Inventory {
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range n {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: model, MemoryMB: 81559, Healthy: true})
	}
	return inv
}

// A job that lists models lands on whichever is free, and waits naming them all.
func TestSubmitModelList(t *testing.T) {
	h := newHarness(t)
	invs := map[string]api.Inventory{"a1": modelInventory("a1", a100, 4), "h1": modelInventory("h1", h100, 4), "l1": modelInventory("l1", l40s, 4)}
	for node, inv := range invs {
		h.heartbeat(node, inv, nil)
	}
	onA := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 4, GPUModel: "a100"})
	h.cycle()
	if _, ok := taskOf(h.heartbeat("a1", invs["a1"], nil), onA.ID); !ok {
		t.Fatalf("job %d not sent to a1", onA.ID)
	}

	// Short names, spaces after the commas: stored resolved, as one list.
	list := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 2, GPUModel: "a100, h100"})
	if want := a100 + "," + h100; list.Spec.GPUModel != want {
		t.Fatalf("gpu_model stored as %q; want %q", list.Spec.GPUModel, want)
	}
	h.cycle()
	if _, ok := taskOf(h.heartbeat("h1", invs["h1"], nil), list.ID); !ok {
		t.Fatalf("job %d listing A100 and H100 not sent to h1, the free one: %+v", list.ID, h.job(list.ID).AttemptList)
	}

	// A100 and H100 all taken now: the next one waits, and the reason names both.
	h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 2, GPUModel: "h100"})
	h.cycle()
	waiting := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 4, GPUModel: "A100,H100"})
	h.cycle()
	why := strings.Join(h.why(waiting.ID).Reasons, " ")
	if !strings.Contains(why, a100+" or "+h100) {
		t.Errorf("why %d: %q; want it to name %s or %s", waiting.ID, why, a100, h100)
	}
	if _, ok := taskOf(h.heartbeat("l1", invs["l1"], nil), waiting.ID); ok {
		t.Errorf("job %d sent to l1, a model it does not list", waiting.ID)
	}
}

func TestSubmitModelListRefused(t *testing.T) {
	h := newHarness(t)
	h.heartbeat("a1", modelInventory("a1", a100, 4), nil)
	h.heartbeat("h1", modelInventory("h1", h100, 8), nil)
	for _, tc := range []struct {
		name, model, says string
	}{
		{"an empty name", "A100,,H100", "empty model name"},
		{"a trailing comma", "A100,", "empty model name"},
		{"a repeat", "A100,a100", "twice"},
		{"a repeat after resolving", "A100," + a100, "twice"},
		{"an unknown model", "A100,V100", `"V100"; models are: ` + a100 + ", " + h100},
		{"an ambiguous name", "A100,NVIDIA", "matches several models"},
		{"too many", "a,b,c,d,e,f,g,h,i", "at most 8"},
		{"a long name", "A100," + strings.Repeat("x", 129), "at most 128"},
		{"a control character", "A100,H1\x0700", "printable"},
		{"more GPUs than any listed model has", "A100,H100 80GB", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := api.JobSpec{Command: []string{"x"}, GPUs: 2, GPUModel: tc.model}
			field := "gpu_model"
			if tc.says == "" {
				spec.GPUs, field = 9, "gpus"
			}
			var e api.Error
			if code := h.do("POST", "/api/v1/jobs", spec, &e); code != http.StatusBadRequest || e.Field != field || !strings.Contains(e.Message, tc.says) {
				t.Errorf("got %d field %q (%s); want 400 field %s saying %q", code, e.Field, e.Message, field, tc.says)
			}
		})
	}
	var jobs api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &jobs)
	if len(jobs.Jobs) != 0 {
		t.Errorf("refused submissions stored %d jobs", len(jobs.Jobs))
	}

	// A gang runs on one model: two nodes of 4 GPUs exist, but not of one model.
	var e api.Error
	gang := api.JobSpec{Command: []string{"x"}, Nodes: 2, GPUsPerNode: 4, GPUModel: "A100,H100"}
	if code := h.do("POST", "/api/v1/jobs", gang, &e); code != http.StatusBadRequest || e.Field != "nodes" {
		t.Errorf("gang over two models: %d field %q (%s); want 400 field nodes", code, e.Field, e.Message)
	}
}

// With no node registered yet, names cannot be judged: the list is kept as given, only
// its form is checked.
func TestSubmitModelListEmptyCluster(t *testing.T) {
	h := newHarness(t)
	j := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 1, GPUModel: "A100,V100"})
	if j.Spec.GPUModel != "A100,V100" {
		t.Errorf("gpu_model stored as %q; want it as given", j.Spec.GPUModel)
	}
	var e api.Error
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, GPUs: 1, GPUModel: "A100,A100"}, &e); code != http.StatusBadRequest || e.Field != "gpu_model" {
		t.Errorf("a repeat with no nodes: %d field %q; want 400 field gpu_model", code, e.Field)
	}
}
