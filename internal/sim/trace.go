package sim

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Job is one job of a trace as the simulator replays it. Loaders fill it; the simulator never
// changes it.
type Job struct {
	// ID is the job's number in the replay: 1.. in order of submit time, then trace line.
	ID int64
	// Name is the trace's own identifier where it has one (a pod name, a rota job ID).
	Name string
	// Line is where the job is in the trace file, for messages.
	Line int

	Submit time.Time
	// Duration is how long the job runs once started, from the trace.
	Duration time.Duration
	// TimeLimit is the limit the trace records; zero means the simulator derives one
	// (Options.TimeLimit).
	TimeLimit time.Duration

	// GPUs in total; Nodes > 1 spreads them evenly over that many nodes (a gang).
	GPUs     int
	Nodes    int
	GPUModel string
	CPUs     int
	MemoryMB int64

	// GPUMilli is the share of one GPU a fractional request asks for, in thousandths of a
	// GPU (1–999, with GPUs 1); 0 for whole GPUs. A replay rounds it up to the whole GPU;
	// --fill keeps it.
	GPUMilli int
	// GPUModels lists the models a job accepts where the trace names several (GPUModel is
	// then empty): a replay and --fill keep to them, and a replay takes the fastest of them
	// that can start the job where speeds are known.
	GPUModels []string
	// CPUMilli is the CPU request in thousandths of a core where the trace gives it (CPUs is
	// it rounded up); 0 means CPUs × 1000.
	CPUMilli int64
	// Speeds is the job's own relative speed per GPU model (rota traces' speeds column),
	// overriding the cluster's table for the models it names; nil for none.
	Speeds map[string]float64

	Queue string
	Team  string
	User  string
}

// Trace is a loaded trace: the jobs that can be replayed and an account of the rows that
// could not.
type Trace struct {
	Format string
	// Rows counts the data rows read, good and bad (headers and blank lines excluded).
	Rows int
	Jobs []Job
	// Skipped lists the rows left out, with the reason, in line order.
	Skipped []BadRow
	// Notes say where the loader had to adapt the trace to what rota can schedule, e.g.
	// fractional GPU requests rounded up. Each is one sentence with its count.
	Notes []string
	// Untimed is set for a trace without time columns (an Alibaba task list without
	// creation_time and deletion_time): its jobs have no submit times or durations, so only
	// --fill, which reads neither, can use it.
	Untimed bool
}

// BadRow is a trace row the loader (or the check against the cluster) refused.
type BadRow struct {
	Line   int
	Reason string
}

func (b BadRow) String() string { return fmt.Sprintf("line %d: %s", b.Line, b.Reason) }

// ErrBadRow is wrapped by the error a strict load returns for the first bad row.
var ErrBadRow = errors.New("bad trace row")

// Formats lists the trace formats LoadTrace reads.
func Formats() []string { return []string{"alibaba-gpu2023", "philly", "rota"} }

// LoadTrace reads a trace file in the named format. With strict set, the first bad row is an
// error; otherwise bad rows are recorded in Trace.Skipped and loading goes on.
func LoadTrace(path, format string, strict bool) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadTrace(f, format, strict)
}

// ReadTrace is LoadTrace for a reader.
func ReadTrace(r io.Reader, format string, strict bool) (*Trace, error) {
	var (
		t   *Trace
		err error
	)
	switch format {
	case "philly":
		t, err = readPhilly(r, strict)
	case "alibaba-gpu2023":
		t, err = readAlibabaPods(r, strict)
	case "rota":
		t, err = readRota(r, strict)
	default:
		return nil, fmt.Errorf("unknown trace format %q (known: %s)", format, strings.Join(Formats(), ", "))
	}
	if err != nil {
		return nil, err
	}
	t.Format = format
	numberJobs(t.Jobs)
	return t, nil
}

// numberJobs sorts jobs by submit time (trace line breaks ties, so equal input gives equal
// order) and numbers them from 1: job IDs then follow arrival, as a server's would.
func numberJobs(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int {
		if c := a.Submit.Compare(b.Submit); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	for i := range jobs {
		jobs[i].ID = int64(i + 1)
	}
}

// rowReader reads a CSV file with a header, finds columns by name and tracks line numbers so
// that every row error can name its line.
//
// Each physical line is one row: a quoted field may hold commas and doubled quotes but not a
// line break. Trace rows never need one, and a stray or unterminated quote then costs its own
// line, not every line after it (as encoding/csv, reading on to the next quote, would make it).
type rowReader struct {
	r    *bufio.Reader
	cols map[string]int
	// width is the header's number of fields; every row must have as many.
	width  int
	strict bool
	trace  *Trace
	line   int
}

// maxLineBytes bounds one line of a trace: longer lines are bad rows, so that a file without
// line breaks cannot make the reader hold all of it.
const maxLineBytes = 1 << 20

// newRowReader reads the header and checks that the required columns are there. A missing
// column is fatal whatever the strictness: no row could be read without it.
func newRowReader(r io.Reader, t *Trace, strict bool, required ...string) (*rowReader, error) {
	rr := &rowReader{r: bufio.NewReader(r), cols: map[string]int{}, strict: strict, trace: t}
	text, err := rr.readLine()
	if err == io.EOF {
		return nil, errors.New("empty trace: no header row")
	}
	if err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	head, err := splitLine(text)
	if err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	rr.width = len(head)
	for i, name := range head {
		name = strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))
		if _, dup := rr.cols[name]; dup && name != "" {
			return nil, fmt.Errorf("trace header names column %q twice", name)
		}
		rr.cols[name] = i
	}
	var missing []string
	for _, c := range required {
		if _, ok := rr.cols[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("trace header lacks column(s) %s (has: %s)", strings.Join(missing, ", "), strings.Join(head, ","))
	}
	return rr, nil
}

// has reports whether the header names the column.
func (rr *rowReader) has(col string) bool {
	_, ok := rr.cols[col]
	return ok
}

// errLongLine is the reason a line over maxLineBytes is bad.
var errLongLine = fmt.Errorf("line longer than %d bytes", maxLineBytes)

// readLine returns the next physical line without its line break and counts it. A line
// over maxLineBytes is read to its end and returned empty with errLongLine.
func (rr *rowReader) readLine() (string, error) {
	var b []byte
	long := false
	for {
		chunk, err := rr.r.ReadSlice('\n')
		if !long {
			b = append(b, chunk...)
			if len(b) > maxLineBytes {
				long, b = true, nil
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		// The last line may lack its line break.
		if err != nil && (err != io.EOF || (len(b) == 0 && !long)) {
			return "", err
		}
		rr.line++
		if long {
			return "", errLongLine
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
}

// splitLine parses one line as a CSV record.
func splitLine(text string) ([]string, error) {
	cr := csv.NewReader(strings.NewReader(text))
	cr.FieldsPerRecord = -1
	rec, err := cr.Read()
	if err == io.EOF {
		return []string{""}, nil
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return nil, pe.Err
	}
	return rec, err
}

// next returns the next data row, skipping blank lines. It returns io.EOF at the end.
func (rr *rowReader) next() ([]string, error) {
	for {
		text, err := rr.readLine()
		if err == io.EOF {
			return nil, io.EOF
		}
		if err == errLongLine {
			rr.trace.Rows++
			if ferr := rr.bad("%v", err); ferr != nil {
				return nil, ferr
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		rr.trace.Rows++
		rec, err := splitLine(text)
		if err != nil {
			if ferr := rr.bad("malformed CSV: %v", err); ferr != nil {
				return nil, ferr
			}
			continue
		}
		if len(rec) != rr.width {
			if ferr := rr.bad("has %d fields, header has %d", len(rec), rr.width); ferr != nil {
				return nil, ferr
			}
			continue
		}
		return rec, nil
	}
}

// field returns the named column of rec, trimmed; "" when the column is absent.
func (rr *rowReader) field(rec []string, name string) string {
	i, ok := rr.cols[name]
	if !ok {
		return ""
	}
	return strings.TrimSpace(rec[i])
}

// bad records the current row as skipped, or returns the fatal error in strict mode.
func (rr *rowReader) bad(format string, args ...any) error {
	b := BadRow{Line: rr.line, Reason: fmt.Sprintf(format, args...)}
	if rr.strict {
		return fmt.Errorf("%w: %s", ErrBadRow, b)
	}
	rr.trace.Skipped = append(rr.trace.Skipped, b)
	return nil
}

// rowError is a reason a single row cannot be used.
type rowError string

func (e rowError) Error() string { return string(e) }

func rowErrorf(format string, args ...any) error { return rowError(fmt.Sprintf(format, args...)) }

// readRows drives rr over the file, handing each row to parse. A rowError from parse makes
// the row bad; any other error stops the load.
func readRows(rr *rowReader, parse func(rec []string) (Job, error)) error {
	for {
		rec, err := rr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		j, err := parse(rec)
		var re rowError
		if errors.As(err, &re) {
			if ferr := rr.bad("%s", re); ferr != nil {
				return ferr
			}
			continue
		}
		if err != nil {
			return err
		}
		j.Line = rr.line
		rr.trace.Jobs = append(rr.trace.Jobs, j)
	}
}
