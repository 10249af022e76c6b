package sim

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fgdTraces is where the Alibaba v2023 trace and the FGD paper's published results lie.
const fgdTraces = "../../../shared/traces"

// fillAlloc runs the paper's protocol on one workload: for each seed, the jobs in a random
// order until requests reach 130% of the cluster's GPUs, each placement side by side; it
// returns each placement's allocation when all arrived, in percent, averaged over the seeds.
func fillAlloc(t *testing.T, w *Workload, seeds []uint64, places []Placement) []float64 {
	t.Helper()
	sum := make([]float64, len(places))
	for _, seed := range seeds {
		fw, err := FillWorkload(w, 1.3, seed)
		if err != nil {
			t.Fatal(err)
		}
		res, err := RunFill(context.Background(), fw, places, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			sum[i] += 100 * r.FillAllocEnd / float64(len(seeds))
		}
	}
	return sum
}

func loadFill(t *testing.T, pods, nodes string) *Workload {
	t.Helper()
	c, err := LoadAlibabaNodes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(mustLoad(t, pods, "alibaba-gpu2023"), c, false)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestFGDSample is the protocol's sanity check on a sample of the trace (every 20th task of
// the default workload, every 10th GPU node), two seeds: FGD allocates at least as much as
// best-fit, less half a point, and best-fit at least as much as packing.
func TestFGDSample(t *testing.T) {
	w := loadFill(t, "testdata/openb_pods_sample.csv", "testdata/openb_nodes_sample.csv")
	got := fillAlloc(t, w, []uint64{42, 43}, []Placement{PlacementFGD, PlacementBestFit, PlacementPacking})
	t.Logf("fgd %.2f%%, bestfit %.2f%%, packing %.2f%%", got[0], got[1], got[2])
	if got[0] < got[1]-0.5 || got[1] < got[2]-0.5 || got[2] < 50 {
		t.Errorf("allocation fgd %.2f%%, bestfit %.2f%%, packing %.2f%%", got[0], got[1], got[2])
	}
}

// TestFGDProtocol runs the FGD paper's protocol (ATC'23, Fig. 9a and the gpushare figure)
// in full and prints rota's allocation next to the paper's published rows. It takes
// minutes, so it runs only with ROTA_FGD_PROTOCOL=1:
//
//	ROTA_FGD_PROTOCOL=1 go test -run TestFGDProtocol -v -timeout 30m ./internal/sim/
func TestFGDProtocol(t *testing.T) {
	if os.Getenv("ROTA_FGD_PROTOCOL") != "1" {
		t.Skip("set ROTA_FGD_PROTOCOL=1 to run the FGD paper's protocol")
	}
	trace := filepath.Join(fgdTraces, "alibaba-gpu-v2023")
	paper := paperAlloc(t, filepath.Join(fgdTraces, "fgd-expected-results", "analysis_allo_discrete.csv"))
	seeds := []uint64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}
	places := []Placement{PlacementFGD, PlacementBestFit, PlacementPacking}
	paperNames := []string{"06-FGD", "05-BestFit", "04-GpuPacking"}
	fmt.Printf("| workload | rota fgd | paper FGD | rota bestfit | paper BestFit | rota packing | paper GpuPacking |\n|---|---|---|---|---|---|---|\n")
	for _, wl := range []string{"openb_pod_list_default", "openb_pod_list_gpushare20", "openb_pod_list_gpushare40",
		"openb_pod_list_gpushare60", "openb_pod_list_gpushare80", "openb_pod_list_gpushare100"} {
		start := time.Now()
		w := loadFill(t, filepath.Join(trace, wl+".csv"), filepath.Join(trace, "openb_node_list_gpu_node.csv"))
		got := fillAlloc(t, w, seeds, places)
		line := "| " + wl
		for i := range places {
			p, ok := paper[wl+","+paperNames[i]]
			ps := "-"
			if ok {
				ps = strconv.FormatFloat(p, 'f', 2, 64)
			}
			line += fmt.Sprintf(" | %.2f | %s", got[i], ps)
		}
		fmt.Println(line + " |")
		t.Logf("%s: %v", wl, time.Since(start).Round(time.Second))
	}
}

// paperAlloc reads the published allocation at 130% arrived, averaged over the seeds, by
// "workload,policy".
func paperAlloc(t *testing.T, path string) map[string]float64 {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, h := range recs[0] {
		if h == "130" {
			col = i
		}
	}
	sum, n := map[string]float64{}, map[string]int{}
	for _, r := range recs[1:] {
		v, err := strconv.ParseFloat(r[col], 64)
		if err != nil {
			t.Fatal(err)
		}
		sum[r[0]+","+r[1]] += v
		n[r[0]+","+r[1]]++
	}
	for k := range sum {
		sum[k] /= float64(n[k])
	}
	return sum
}
