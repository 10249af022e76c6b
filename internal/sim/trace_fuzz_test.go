package sim

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// maxTraceCount is the bound parseCount puts on every count of a trace, so that
// arithmetic on them cannot overflow; GPUs, nodes and CPUs have tighter ones (maxTraceGPUs…).
const maxTraceCount = maxTraceSeconds * 1000

// prepareTimeout bounds Prepare on one fuzz input, which takes microseconds: the fuzzing
// engine has no timeout of its own for one input, and a hang would stall it silently.
const prepareTimeout = time.Second

// traceSeeds are traces of each format, with rows written to be refused, besides those
// in testdata.
var traceSeeds = map[string][]string{
	"philly": {
		"timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,2951.5,16,2951.0,6214e9\n",
		"timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1e400,1,66,a\n2017-10-09 07:01:55,NaN,1,66,a\n2017-10-09 07:01:55,315360001,1,66,a\n2017-10-09 07:01:55,-0,1,66,a\n",
		"\ufefftimestamp, duration ,num_gpus,cluster\n\n2017-10-09 07:01:55,\"66\",\"2\",\"a,b\"\n2017-10-09 07:01:55,66,9999999999999999999,a\n2017-10-09 07:01:55,66,\"1\n2\",a\n",
		"timestamp,timestamp,duration,num_gpus,cluster\n2017-10-09 07:01:55,2017-10-09 07:01:55,1,1,a\n",
		"duration,num_gpus\n1,1\n",
		"",
	},
	"alibaba-gpu2023": {
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np0,12000,16384,1,460,V100M16|V100M32,LS,Running,0,12537496,0\np1,88000,327680,8,1000,A100,BE,Pending,10001278,10001403,\n",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\np,-1,0,0,0,0,0,0\np,0,0,0,5,0,0,0\np,0,0,1,0,10,5,\np,0,0,1,0,0,10,20\np,315360000001,0,0,0,0,0,0\np,0,0,0,0,9223372036854775807,0,0\n",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,deletion_time,scheduled_time\np,1,1,2,1000,,0,1,0\n",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,deletion_time,scheduled_time\n\"p,1,1,1,500,,0,1,0\np,1,1,1,500,,0,1,0\r\n",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,500\np,1000,1024,2,1000\n",
	},
	"rota": {
		"id,submit,start,end,duration_s,time_limit_s,gpus,nodes,gpu_model,cpus,memory_mb,queue,team,user,state\n1,2025-01-06T00:00:00Z,2025-01-06T00:05:00Z,2025-01-06T01:05:00Z,,3600,1,,A100,4,16384,train,vision,ann,SUCCEEDED\n2,2025-01-06T00:00:00Z,,,600.5,,16,2,,64,1024,batch,nlp,bo,FAILED\n",
		"submit,gpus,duration_s,nodes,state\n2025-01-06T00:00:00Z,3,600,2,SUCCEEDED\n2025-01-06T00:00:00Z,1,600,,DONE\n9999-12-31T23:59:59.999999999+14:00,0,315360000,,\n0001-01-01T00:00:00Z,1,0.0004,,\n",
		"submit,gpus,start,end\n2025-01-06T00:00:00Z,1,2025-01-06T02:00:00Z,2025-01-06T01:00:00Z\n2025-01-06T00:00:00Z,1,,\n2025-01-06T00:00:00Z,1,2025-01-05T00:00:00Z,2025-01-06T01:00:00Z\n2025-01-06T00:00:00Z,1,2025-01-06T00:00:00Z,\n",
		"submit,gpus,duration_s,time_limit_s,cpus,memory_mb\n2025-01-06T00:00:00Z,0,1,-1,0,0\n2025-01-06T00:00:00Z,0,1,1,315360000001,0\n",
		"submit,gpus,duration_s,gpu_model,speeds\n2025-01-06T00:00:00Z,1,600,A100,A100=1;L4=0.25\n2025-01-06T00:00:00Z,1,600,,A100=0\n2025-01-06T00:00:00Z,1,600,,A100\n2025-01-06T00:00:00Z,1,600,,=1;L4=NaN\n2025-01-06T00:00:00Z,1,600,,L4=1;L4=1\n2025-01-06T00:00:00Z,1,600,,\"A100=1e400;\"\n2025-01-06T00:00:00Z,1,600,,;\n",
	},
	"alibaba-nodes": {
		"sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0234,96000,393216,8,G2\nopenb-node-0235,96000,393216,0,\n",
		"sn,cpu_milli,memory_mib,gpu,model\nn,96000,393216,8,\nn,1,1,1,G\n",
		"sn,cpu_milli,memory_mib,gpu,model\nn,-1,0,0,G\n",
	},
}

// testdataSeeds adds the testdata traces to the seeds of their format.
func testdataSeeds(f *testing.F, format string, files ...string) {
	for _, name := range files {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range traceSeeds[format] {
		f.Add([]byte(s))
	}
}

// FuzzReadPhilly, FuzzReadAlibabaPods and FuzzReadRota read a fuzzed trace. Oracle (see
// checkTrace): every data row is a job or a skipped row with its reason; a job's values are
// within the bounds the readers promise; a strict load agrees; Prepare on a small cluster
// finishes promptly and accounts for every job.
func FuzzReadPhilly(f *testing.F) {
	testdataSeeds(f, "philly", "philly_excerpt.csv", "philly_bad.csv", "philly_no_gpus_column.csv")
	// Regression seeds of bugs this target found: a job of 2^63-1 GPUs loaded, and then
	// Prepare's gangShape overflowed and looped for ever; a bare quote in a row's first
	// field panicked in csv.Reader.FieldPos; a column named twice let rowReader.field
	// index past the end of a row.
	f.Add([]byte("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,9223372036854775807,66.0,11cb48\n"))
	f.Add([]byte("timestamp,duration,num_gpus,gpu_time,cluster\nx\"\n"))
	f.Add([]byte("timestamp,timestamp,duration,num_gpus,cluster\nx,2017-10-09 07:01:55,1,1\n"))
	// An unterminated quote took every line after it into one bad row.
	f.Add([]byte("timestamp,duration,num_gpus,gpu_time,cluster\n\"2017-10-09 07:01:55,66,1,66,a\n2017-10-09 07:01:55,66,1,66,a\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkTrace(t, "philly", data) })
}

func FuzzReadAlibabaPods(f *testing.F) {
	testdataSeeds(f, "alibaba-gpu2023", "alibaba_pods.csv")
	// A regression seed of a bug this target found: times were bounded as counts, so this
	// job loaded with a duration of minus 2,562,047 hours.
	f.Add([]byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\np,0,0,0,0,0,10000000000,0\n"))
	// A known bug, kept so that it shows until it is fixed: cpu_milli is bounded only by
	// parseCount, so a pod loads with more CPUs than maxTraceCPUs, which the rota reader
	// refuses (here 1,048,577).
	f.Add([]byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\np,1048577000,0,0,0,0,0,0\n"))
	// An unterminated quote (see FuzzReadPhilly).
	f.Add([]byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n\"p,0,0,1,500,0,10,0\np,0,0,1,500,0,10,0\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkTrace(t, "alibaba-gpu2023", data) })
}

func FuzzReadRota(f *testing.F) {
	testdataSeeds(f, "rota", "rota_bad.csv")
	// Regression seeds of bugs this target found: gangShape counts up to a divisor of the
	// GPUs, so a prime count kept Prepare busy for seconds (minutes near parseCount's
	// bound); a duration from end − start escaped the ten-year bound.
	f.Add([]byte("submit,gpus,duration_s\n2025-01-06T00:00:00Z,2000000011,600\n"))
	f.Add([]byte("submit,gpus,start,end\n2025-01-06T00:00:00Z,1,2025-01-06T00:00:00Z,2125-01-06T00:00:00Z\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkTrace(t, "rota", data) })
}

// checkTrace is the oracle of the trace fuzz targets.
func checkTrace(t *testing.T, format string, data []byte) {
	defer failOnPanic(t, data)
	tr, err := ReadTrace(bytes.NewReader(data), format, false)
	if err != nil {
		// Only the file as a whole may fail a lenient load (no header, a column missing);
		// a strict load fails then too.
		if errors.Is(err, ErrBadRow) {
			t.Fatalf("%q: a lenient load failed on a row: %v", data, err)
		}
		if _, serr := ReadTrace(bytes.NewReader(data), format, true); serr == nil {
			t.Fatalf("%q: a lenient load failed (%v), a strict one did not", data, err)
		}
		return
	}
	if tr.Format != format || tr.Rows != len(tr.Jobs)+len(tr.Skipped) {
		t.Fatalf("%q: format %q, %d rows, %d jobs and %d skipped", data, tr.Format, tr.Rows, len(tr.Jobs), len(tr.Skipped))
	}
	lines := map[int]bool{}
	for i, b := range tr.Skipped {
		if b.Line < 2 || b.Reason == "" || lines[b.Line] || (i > 0 && b.Line < tr.Skipped[i-1].Line) {
			t.Fatalf("%q: skipped rows %v out of order, repeated or without reason", data, tr.Skipped)
		}
		lines[b.Line] = true
	}
	for i, j := range tr.Jobs {
		fail := func(what string) {
			t.Helper()
			t.Fatalf("%q: job %d (line %d) %s: %+v", data, i+1, j.Line, what, j)
		}
		switch {
		case j.ID != int64(i+1) || j.Line < 2 || lines[j.Line]:
			fail("misnumbered or on a line counted twice")
		case i > 0 && (j.Submit.Before(tr.Jobs[i-1].Submit) || (j.Submit.Equal(tr.Jobs[i-1].Submit) && j.Line < tr.Jobs[i-1].Line)):
			fail("out of submit order")
		case j.Duration < 0 || j.Duration > maxTraceSeconds*time.Second || j.TimeLimit < 0 || j.TimeLimit > maxTraceSeconds*time.Second:
			fail("has a duration or time limit outside 0..10 years")
		case j.GPUs < 0 || j.GPUs > maxTraceGPUs || j.Nodes < 0 || j.Nodes > maxTraceNodes || j.CPUs < 0 || j.CPUs > maxTraceCPUs ||
			j.MemoryMB < 0 || j.MemoryMB > maxTraceCount:
			fail("asks for more GPUs, nodes, CPUs or memory than a trace row may")
		case j.Nodes > 1 && j.GPUs%j.Nodes != 0:
			fail("spreads its GPUs unevenly")
		case !validSpeeds(j.Speeds):
			fail("has a speed that is not in (0, 100]")
		case format == "philly" && (j.GPUs < 1 || j.Team == ""):
			fail("has no GPUs or no team")
		case format == "alibaba-gpu2023" && j.Team == "":
			fail("has no team")
		}
		lines[j.Line] = true
	}

	strict, err := ReadTrace(bytes.NewReader(data), format, true)
	switch {
	case len(tr.Skipped) == 0 && (err != nil || !reflect.DeepEqual(strict, tr)):
		t.Fatalf("%q: nothing skipped, yet a strict load differs: %v", data, err)
	case len(tr.Skipped) > 0 && (!errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), tr.Skipped[0].String())):
		t.Fatalf("%q: %v skipped, yet a strict load says %v", data, tr.Skipped[0], err)
	}

	checkPrepare(t, data, tr)
}

// validSpeeds reports whether a job's own speeds are as the readers promise: a nil map or
// a non-empty one of named models, each speed in (0, 100].
func validSpeeds(s map[string]float64) bool {
	if s != nil && len(s) == 0 {
		return false
	}
	for m, v := range s {
		if m == "" || checkSpeed(v) != nil {
			return false
		}
	}
	return true
}

// fuzzCluster is a small cluster of three node shapes, with the default queues.
func fuzzCluster() *Cluster {
	c := &Cluster{Nodes: []NodeSpec{
		{Name: "a-0", GPUs: 8, GPUModel: "A100", CPUs: 96, MemoryMB: 768 << 10},
		{Name: "a-1", GPUs: 8, GPUModel: "A100", CPUs: 96, MemoryMB: 768 << 10},
		{Name: "v-0", GPUs: 4, GPUModel: "V100M16", CPUs: 32, MemoryMB: 256 << 10},
		{Name: "c-0", CPUs: 128, MemoryMB: 1 << 20},
	}}
	if err := c.validate(); err != nil {
		panic(err)
	}
	return c
}

// checkPrepare checks the workload of a loaded trace: every job is replayed or skipped
// with a reason, and each one replayed is spread evenly over nodes the cluster has.
func checkPrepare(t *testing.T, data []byte, tr *Trace) {
	type result struct {
		w   *Workload
		err error
	}
	done := make(chan result, 1)
	c := fuzzCluster()
	go func() {
		w, err := Prepare(tr, c, false)
		done <- result{w, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(prepareTimeout):
		// The goroutine is left running: nothing can stop it.
		t.Fatalf("%q: Prepare did not finish within %v", data, prepareTimeout)
	}
	w, err := res.w, res.err
	if err != nil {
		t.Fatalf("%q: a lenient Prepare failed: %v", data, err)
	}
	if len(w.Jobs)+len(w.Skipped)-len(tr.Skipped) != len(tr.Jobs) || len(w.shapes) != len(w.Jobs) {
		t.Fatalf("%q: %d jobs loaded; %d replayed and %d skipped", data, len(tr.Jobs), len(w.Jobs), len(w.Skipped)-len(tr.Skipped))
	}
	for i, j := range w.Jobs {
		sh := w.shapes[i]
		fits := 0
		for _, n := range c.Nodes {
			if n.GPUs >= sh.gpusPerNode && n.CPUs >= sh.cpus && n.MemoryMB >= sh.memoryMB &&
				(sh.gpusPerNode == 0 || j.GPUModel == "" || n.GPUModel == j.GPUModel) {
				fits++
			}
		}
		if j.ID != int64(i+1) || sh.nodes < 1 || sh.nodes*sh.gpusPerNode != j.GPUs || sh.cpus*sh.nodes < j.CPUs ||
			int64(sh.nodes)*sh.memoryMB < j.MemoryMB || fits < sh.nodes {
			t.Fatalf("%q: job %+v replayed as %+v on a cluster where %d nodes fit it", data, j, sh, fits)
		}
	}
}

// FuzzReadAlibabaNodes reads a fuzzed openb node list as a cluster. Oracle: an accepted
// cluster is valid (named nodes, unique, capacities within parseCount's bound, a model
// for every node with GPUs, a default queue).
func FuzzReadAlibabaNodes(f *testing.F) {
	testdataSeeds(f, "alibaba-nodes", "alibaba_nodes.csv")
	// A column named twice (see FuzzReadPhilly), in a node list.
	f.Add([]byte("sn,sn,cpu_milli,memory_mib,gpu,model\nn,96000,393216,8,G2\n"))
	f.Fuzz(checkAlibabaNodes)
}

func checkAlibabaNodes(t *testing.T, data []byte) {
	defer failOnPanic(t, data)
	c, err := readAlibabaNodes(bytes.NewReader(data))
	if err != nil {
		return
	}
	if len(c.Nodes) == 0 || c.DefaultQueue == "" {
		t.Fatalf("%q: cluster of %d nodes, default queue %q", data, len(c.Nodes), c.DefaultQueue)
	}
	names := map[string]bool{}
	for _, n := range c.Nodes {
		if n.Name == "" || names[n.Name] || n.GPUs < 0 || n.GPUs > maxTraceCount || n.CPUs < 0 || n.CPUs > maxTraceCount ||
			n.MemoryMB < 0 || n.MemoryMB > maxTraceCount || (n.GPUs > 0 && n.GPUModel == "") {
			t.Fatalf("%q: node %+v", data, n)
		}
		names[n.Name] = true
	}
}

// failOnPanic turns a panic of the code under test into a failure that names the input,
// so that one panicking input does not end the package's other tests with it.
func failOnPanic(t *testing.T, data []byte) {
	if r := recover(); r != nil {
		t.Fatalf("%q: panic: %v\n%s", data, r, debug.Stack())
	}
}
