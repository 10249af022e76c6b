package server

import (
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// A device that tells no utilisation (a MIG device) reads 0 %; its job must not be taken
// for idle and stopped, nor its GPU exported as 0 % busy.
func TestUnknownUtilisationIsNeverIdle(t *testing.T) {
	h := newHarness(t)
	h.idleQueue(60, api.IdleStop)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"sleep"}})
	gpu := h.gpuOf(j.ID)
	for range 5 {
		h.clock.Add(time.Minute)
		resp := h.beatFull("n1", 2, func(hb *api.Heartbeat) {
			hb.Telemetry = &api.Telemetry{Time: h.clock.Now(),
				GPUs:  []api.GPUSample{{Index: gpu, UtilizationUnknown: true, MemoryUsedMB: 700, TemperatureC: 50}},
				Tasks: []api.TaskUsage{{JobID: j.ID, Attempt: 1, GPUMemoryMB: 700}}}
		})
		if len(resp.Tasks) != 1 || resp.Tasks[0].Stop || resp.Tasks[0].Notice != "" {
			t.Fatalf("task %+v; want it left alone", resp.Tasks)
		}
	}
	if got := h.job(j.ID); got.IdleSince != nil || got.State != api.StateRunning {
		t.Errorf("job idle since %v, %s; want never idle, RUNNING", got.IdleSince, got.State)
	}
	if evs := h.events(api.EventIdle); len(evs) != 0 {
		t.Errorf("idle events %+v; want none", evs)
	}
	// The same readings as a known 0 % make it idle: the test can tell.
	h.idleReading(j, 0, time.Second)
	if got := h.job(j.ID); got.IdleSince == nil {
		t.Error("a known 0 % reading did not flag the job idle")
	}

}

func TestUnknownUtilisationHasNoSeries(t *testing.T) {
	h := newHarness(t)
	h.metricsNode(&api.Telemetry{Time: h.clock.Now(), GPUs: []api.GPUSample{
		{Index: 0, UtilizationUnknown: true, MemoryUsedMB: 700, TemperatureC: 50},
		{Index: 1, UtilizationPct: 40, MemoryUsedMB: 100, PowerW: 200, TemperatureC: 50},
	}})
	code, fams := h.scrapeMetrics(h.token)
	if code != 200 {
		t.Fatalf("scrape: %d", code)
	}
	var utilGPUs, memGPUs []string
	for name, out := range map[string]*[]string{"rota_gpu_utilization_ratio": &utilGPUs, "rota_gpu_memory_used_bytes": &memGPUs} {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu" {
					*out = append(*out, l.GetValue())
				}
			}
		}
	}
	if len(utilGPUs) != 1 || utilGPUs[0] != "1" || len(memGPUs) != 2 {
		t.Errorf("utilisation series for GPUs %v, memory for %v; want utilisation of GPU 1 only, memory of both", utilGPUs, memGPUs)
	}
}
