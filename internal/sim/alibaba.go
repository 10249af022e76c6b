package sim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// alibabaEpoch is the origin of the Alibaba v2023 trace's anonymised, relative times. Any
// fixed instant would do; this one makes printed times read as offsets from 1970-01-01.
var alibabaEpoch = time.Unix(0, 0).UTC()

// readAlibabaPods reads an openb pod list of the Alibaba GPU trace v2023 (FGD, ATC'23):
// name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
// deletion_time, scheduled_time. Times are seconds from an anonymised origin.
//
//   - Submit is creation_time. The run time is deletion_time − scheduled_time, or
//     deletion_time − creation_time for pods that were never scheduled (phase Pending). A
//     list without creation_time and deletion_time is read as untimed (Trace.Untimed): only
//     --fill, which never reads times, can use it.
//   - A fractional request (num_gpu 1, gpu_milli below 1000) is kept in Job.GPUMilli: --fill
//     places it as a share of one GPU, a replay rounds it up to one whole GPU (the count is
//     given in Trace.Notes).
//   - CPUs are rounded up to whole cores (Job.CPUMilli keeps the request); memory in MiB is
//     taken as MB.
//   - gpu_spec with one model constrains the model; with several ("A|B") they are kept in
//     Job.GPUModels, which --fill and a replay honour (counted in Notes).
//   - The trace names no users or groups; the QoS class (LS, BE, Burstable, Guaranteed) is
//     the closest grouping and becomes the team.
func readAlibabaPods(r io.Reader, strict bool) (*Trace, error) {
	t := &Trace{}
	rr, err := newRowReader(r, t, strict, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	switch created, deleted := rr.has("creation_time"), rr.has("deletion_time"); {
	case !created && !deleted:
		t.Untimed = true
	case !created || !deleted:
		return nil, errors.New("trace header has one of creation_time and deletion_time: want both, or neither for --fill")
	}
	var fractional, multiModel int
	err = readRows(rr, func(rec []string) (Job, error) {
		j := Job{Name: rr.field(rec, "name"), Team: rr.field(rec, "qos")}
		if j.Team == "" {
			j.Team = "none"
		}
		cpuMilli, err := parseCount(rr, rec, "cpu_milli")
		if err != nil {
			return Job{}, err
		}
		if cpuMilli > maxTraceCPUs*1000 {
			return Job{}, rowErrorf("cpu_milli %d: at most %d", cpuMilli, maxTraceCPUs*1000)
		}
		j.CPUs, j.CPUMilli = int((cpuMilli+999)/1000), cpuMilli
		if j.MemoryMB, err = parseCount(rr, rec, "memory_mib"); err != nil {
			return Job{}, err
		}
		n, err := parseCount(rr, rec, "num_gpu")
		if err != nil {
			return Job{}, err
		}
		if n > maxTraceGPUs {
			return Job{}, rowErrorf("num_gpu %d: at most %d", n, maxTraceGPUs)
		}
		milli, err := parseCount(rr, rec, "gpu_milli")
		if err != nil {
			return Job{}, err
		}
		switch {
		case n == 0 && milli > 0:
			return Job{}, rowErrorf("gpu_milli %d without num_gpu", milli)
		case n == 1 && milli > 0 && milli < 1000:
			fractional++
			j.GPUMilli = int(milli)
		}
		j.GPUs = int(n)
		if spec := rr.field(rec, "gpu_spec"); spec != "" {
			models := strings.Split(spec, "|")
			if len(models) == 1 {
				j.GPUModel = models[0]
			} else {
				j.GPUModels = models
				multiModel++
			}
		}
		if t.Untimed {
			j.Submit = alibabaEpoch
			return j, nil
		}
		created, err := parseOffset(rr, rec, "creation_time")
		if err != nil {
			return Job{}, err
		}
		deleted, err := parseOffset(rr, rec, "deletion_time")
		if err != nil {
			return Job{}, err
		}
		start := created
		if rr.field(rec, "scheduled_time") != "" {
			if start, err = parseOffset(rr, rec, "scheduled_time"); err != nil {
				return Job{}, err
			}
		}
		if deleted < start {
			return Job{}, rowErrorf("deletion_time %d is before the start %d", deleted, start)
		}
		j.Submit = alibabaEpoch.Add(time.Duration(created) * time.Second)
		j.Duration = time.Duration(deleted-start) * time.Second
		return j, nil
	})
	if err != nil {
		return nil, err
	}
	if fractional > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d tasks ask for a fraction of a GPU: a replay rounds each up to 1 whole GPU, --fill keeps them fractional", fractional))
	}
	if multiModel > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d tasks allowed several GPU models and take whichever of them starts first (the fastest, where speeds are known)", multiModel))
	}
	return t, nil
}

// parseCount reads a non-negative whole number from the named column.
func parseCount(rr *rowReader, rec []string, col string) (int64, error) {
	s := rr.field(rec, col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, rowErrorf("bad %s %q: want a whole number", col, s)
	}
	if v < 0 {
		return 0, rowErrorf("negative %s %d", col, v)
	}
	if v > maxTraceSeconds*1000 {
		return 0, rowErrorf("%s %d is out of range", col, v)
	}
	return v, nil
}

// parseOffset reads a time column: seconds from the trace's origin, at most 10 years, so
// that a time and a duration made from it stay far inside time.Duration.
func parseOffset(rr *rowReader, rec []string, col string) (int64, error) {
	v, err := parseCount(rr, rec, col)
	if err == nil && v > maxTraceSeconds {
		err = rowErrorf("%s %d is more than 10 years from the trace's start", col, v)
	}
	return v, err
}

// LoadAlibabaNodes reads an openb node list (sn, cpu_milli, memory_mib, gpu, model) as a
// cluster. CPUs are rounded down to whole cores, so that no job is promised a fraction of a
// core a node lacks.
func LoadAlibabaNodes(path string) (*Cluster, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := readAlibabaNodes(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Source = path
	return c, nil
}

func readAlibabaNodes(r io.Reader) (*Cluster, error) {
	var t Trace
	rr, err := newRowReader(r, &t, true, "sn", "cpu_milli", "memory_mib", "gpu", "model")
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	for {
		rec, err := rr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		n := NodeSpec{Name: rr.field(rec, "sn"), GPUModel: rr.field(rec, "model")}
		cpuMilli, err := parseCount(rr, rec, "cpu_milli")
		if err == nil {
			n.MemoryMB, err = parseCount(rr, rec, "memory_mib")
		}
		var gpus int64
		if err == nil {
			gpus, err = parseCount(rr, rec, "gpu")
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", rr.line, err)
		}
		n.CPUs, n.GPUs = int(cpuMilli/1000), int(gpus)
		c.Nodes = append(c.Nodes, n)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// isAlibabaNodeList reports whether path looks like an openb node list rather than a cluster
// file: a CSV whose header starts with "sn,".
func isAlibabaNodeList(path string) bool {
	if !strings.HasSuffix(path, ".csv") {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 3)
	_, err = io.ReadFull(f, buf)
	return err == nil && string(buf) == "sn,"
}
