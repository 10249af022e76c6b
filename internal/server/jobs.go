package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

const (
	defaultPage = 500
	maxPage     = 5000
)

// idempotencyWindow is how long a submit's Idempotency-Key is remembered: long enough for
// any client's retries, short enough that the table stays small.
const idempotencyWindow = 24 * time.Hour

// idempotencyKeyRE is what an Idempotency-Key may be.
var idempotencyKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`) })

// handleSubmit creates a job (or an array of them) for the caller. The job's user is the
// caller; an admin may submit on another user's behalf, and the job records who did.
// With an Idempotency-Key, a retried submit gets the job the first one created.
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	var spec api.JobSpec
	if status, e := s.decodeJSON(w, r, &spec); e != nil {
		writeError(w, status, e)
		return
	}
	id := caller(r)
	key := r.Header.Get("Idempotency-Key")
	if key != "" && !idempotencyKeyRE().MatchString(key) {
		writeError(w, http.StatusBadRequest, invalid("Idempotency-Key", "must be 1 to 128 characters of letters, digits and ._:-"))
		return
	}
	// The hash is of the request as decoded, so a retry that encodes it differently
	// still matches.
	hash := ""
	if key != "" {
		raw, _ := json.Marshal(spec)
		sum := sha256.Sum256(raw)
		hash = hex.EncodeToString(sum[:])
	}

	s.mu.Lock()
	locked := true
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	// Job IDs are handed out from memory, which must first be vouched for.
	if err := s.holdWrites(); err != nil {
		commitError(w, "the job could not be stored", err)
		return
	}
	if err := s.resync(r.Context()); err != nil {
		commitError(w, "the job could not be stored", err)
		return
	}
	if key != "" {
		// A submit with the same key still being stored answers this one: wait for it.
		for g, ok := s.inflightKey(id.User, key); ok; g, ok = s.inflightKey(id.User, key) {
			s.mu.Unlock()
			_ = g.wait()
			s.mu.Lock()
		}
		if rec, ok := s.state.Idempotency(id.User, key); ok {
			// The replay may read an evicted job from the store: not under the lock.
			s.mu.Unlock()
			locked = false
			s.replaySubmit(r.Context(), w, rec, hash)
			return
		}
	}
	limits := s.state.Limits()
	if wait, ok := s.submits.allow(id.User, limits.SubmitsPerSecond, limits.SubmitBurst, s.cfg.Clock.Now()); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeRateLimited,
			Message: fmt.Sprintf("%s submits faster than the limit of %g per second (bursts of %d); try again in %d s", id.User, limits.SubmitsPerSecond, limits.SubmitBurst, secs)})
		return
	}
	if e := s.submitter(id, &spec); e != nil {
		status := http.StatusBadRequest
		if e.Code == api.CodeForbidden {
			status = http.StatusForbidden
		}
		writeError(w, status, e)
		return
	}
	if e := checkSizes(&spec, limits); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	if e := validateSpec(&spec, s.state); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	if e := validateDeadline(&spec, s.cfg.Clock.Now()); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	indices, limit := []int(nil), 0
	if spec.Array != "" {
		var e *api.Error
		if indices, limit, e = parseArray(spec.Array); e != nil {
			writeError(w, http.StatusBadRequest, e)
			return
		}
	}
	count := max(len(indices), 1)
	if waiting := s.state.Waiting(spec.User) + s.inflightWaiting(spec.User); waiting+count > limits.MaxPendingPerUser {
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeRateLimited,
			Message: fmt.Sprintf("%s has %d jobs waiting to start and may have at most %d; this submit adds %d", spec.User, waiting, limits.MaxPendingPerUser, count)})
		return
	}
	now := s.cfg.Clock.Now()
	first := s.reserveJobIDs(count)
	b := &store.Batch{}
	submittedBy := ""
	if id.User != spec.User {
		submittedBy = id.User
	}
	add := func(j api.Job) {
		j.State, j.Reason, j.Message = s.initialState(&j)
		j.SubmittedBy = submittedBy
		b.Jobs = append(b.Jobs, j)
		msg := "submitted to queue " + spec.Queue
		if submittedBy != "" {
			msg += " by " + submittedBy + " on behalf of " + spec.User
		}
		ev := audit(r, now, api.EventSubmit, "%s", msg)
		ev.JobID, ev.To, ev.Reason = j.ID, j.State, j.Reason
		b.Events = append(b.Events, ev)
	}
	if indices == nil {
		add(api.Job{ID: first, Spec: spec, SubmitTime: now, UserHold: spec.Hold})
	}
	for i, idx := range indices {
		add(api.Job{ID: first + int64(i), Spec: spec, SubmitTime: now, UserHold: spec.Hold, ArrayID: first, ArrayIndex: &idx, ArrayLimit: limit})
	}
	if key != "" {
		b.Idempotency = []store.IdempotencyRecord{{User: id.User, Key: key, Hash: hash, JobID: first, Created: now}}
		if oldest := s.state.OldestIdempotency(); !oldest.IsZero() && now.Sub(oldest) > idempotencyWindow+time.Hour {
			b.PruneIdempotency = now.Add(-idempotencyWindow)
		}
	}
	job := b.Jobs[0]
	g, err := s.enqueueSubmit(b, id.User, key)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeRateLimited,
			Message: fmt.Sprintf("the server has %d jobs waiting to be stored; try again in 1 s", s.groups.jobs)})
		return
	}
	// The answer goes out only after the group's commit: an acknowledged job is a durable
	// job. The commit runs outside s.mu (groupcommit.go), and what follows a commit that
	// succeeded needs nothing of the state: only a failed one takes the lock again, so a
	// submit waits for the lock once, not twice, behind a cycle or a burst of heartbeats.
	s.mu.Unlock()
	locked = false
	err = g.wait()
	if err != nil {
		s.mu.Lock()
		locked = true
		// After a commit of unknown outcome the state was read again: the key tells
		// whether the job was stored after all.
		if rec, ok := s.state.Idempotency(id.User, key); key != "" && ok && rec.Hash == hash {
			s.log.Warn("submit: the commit reported an error but the job was stored", "job", rec.JobID, "err", err)
			s.mu.Unlock()
			locked = false
			s.replaySubmit(r.Context(), w, rec, hash)
			return
		}
		s.log.Error("submit: commit failed", "err", err)
		commitError(w, "the job could not be stored", err)
		return
	}
	// A line a submit is too many for a server that takes thousands a second: journald,
	// by default, drops a service's lines past 10,000 in 30 s, its warnings among them.
	// The job's events record the submit; --log-level debug logs it too.
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Debug("job submitted", "job", job.ID, "jobs", len(b.Jobs), "user", spec.User, "queue", spec.Queue, "gpus", spec.GPUs)
	}
	s.wake()
	redactEnv(id, &job)
	writeJSON(w, http.StatusCreated, &job)
}

// replaySubmit answers a retried submit with the job the first one created, or 409 when
// the key was used for a different request. Callers do not hold s.mu.
func (s *Server) replaySubmit(ctx context.Context, w http.ResponseWriter, rec store.IdempotencyRecord, hash string) {
	if rec.Hash != hash {
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "Idempotency-Key",
			Message: fmt.Sprintf("this Idempotency-Key was used for a different request, which created job %d; use a new key for a new job", rec.JobID)})
		return
	}
	job, _, ok, err := s.lookupJob(ctx, rec.JobID)
	if err != nil {
		storeError(w, "reading the job this key created", err)
		return
	}
	if !ok {
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("the job %d this key created is missing", rec.JobID)})
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	writeJSON(w, http.StatusOK, job)
}

// submitter sets the job's user from the caller and checks what the caller may ask for:
// only admins submit for others or raise their priority; a member names only its teams.
func (s *Server) submitter(id auth.Identity, spec *api.JobSpec) *api.Error {
	admin := id.Role == auth.RoleAdmin
	switch {
	case spec.User == "":
		spec.User = id.User
	case spec.User != id.User && !admin:
		return forbidden(id, "on-behalf", "only admins submit jobs for another user; %s tried to submit as %s", id.User, truncateName(spec.User))
	}
	if e := s.validName("user", spec.User); e != nil {
		return e
	}
	if spec.Nice < 0 && !admin {
		return forbidden(id, "negative-nice", "only admins may raise a job's priority with a negative nice (%d)", spec.Nice)
	}
	if spec.Team == "" {
		spec.Team = s.state.TeamOf(spec.User)
		return nil
	}
	if e := s.validName("team", spec.Team); e != nil {
		return e
	}
	if admin || spec.Team == "default" {
		return nil
	}
	if teams := s.state.TeamsOf(spec.User); !slices.Contains(teams, spec.Team) {
		return forbidden(id, "team-member", "%s is not a member of team %s; your teams: %s", spec.User, spec.Team, joinOr(teams, "none (team default)"))
	}
	return nil
}

// checkSizes bounds the command, environment and name by the limits in force.
func checkSizes(spec *api.JobSpec, l api.Limits) *api.Error {
	n := 0
	for _, a := range spec.Command {
		n += len(a) + 1
		if strings.ContainsRune(a, 0) {
			return invalid("command", "an argument holds a NUL byte, which no program can receive")
		}
	}
	if n > l.MaxCommandBytes {
		return invalid("command", "is %d bytes; at most %d are allowed", n, l.MaxCommandBytes)
	}
	n = 0
	for k, v := range spec.Env {
		n += len(k) + len(v) + 2
		if strings.ContainsRune(v, 0) {
			return invalid("env", "the value of %s holds a NUL byte, which no environment can hold", truncateName(k))
		}
	}
	if n > l.MaxEnvBytes {
		return invalid("env", "is %d bytes; at most %d are allowed", n, l.MaxEnvBytes)
	}
	if len(spec.Name) > l.MaxNameLength {
		return invalid("name", "is %d characters; at most %d are allowed", len(spec.Name), l.MaxNameLength)
	}
	if strings.ContainsRune(spec.WorkDir, 0) || len(spec.WorkDir) > 4096 || (spec.WorkDir != "" && !filepath.IsAbs(spec.WorkDir)) {
		return invalid("workdir", "must be an absolute path of at most 4096 bytes")
	}
	return nil
}

// pageQuery reads a page's size (limit) and cursor (after, the last ID of the page
// before) from a listing's query.
func pageQuery(q url.Values) (limit int, after int64, e *api.Error) {
	limit64, e := queryInt(q, "limit", 1, maxPage, defaultPage)
	if e != nil {
		return 0, 0, e
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, invalid("after", "must be the cursor from a previous page")
		}
		after = n
	}
	return int(limit64), after, nil
}

func (s *Server) handleListJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	states := map[api.JobState]bool{}
	all := false
	for _, v := range strings.Split(q.Get("state"), ",") {
		v = strings.ToUpper(strings.TrimSpace(v))
		switch {
		case v == "":
		case v == "ALL":
			all = true
		case api.JobState(v).Valid():
			states[api.JobState(v)] = true
		default:
			writeError(w, http.StatusBadRequest, invalid("state", "unknown state %q; use PENDING, HELD, ASSIGNED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT or all", v))
			return
		}
	}
	limit, after, e := pageQuery(q)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	// Jobs not ended are all in memory, where a listing of them pages either way.
	inMemory := !all
	for st := range states {
		inMemory = inMemory && !st.Terminal()
	}
	before, e := queryInt(q, "before", 1, math.MaxInt64, 0)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	arrays, e := queryString(q, "arrays", 16)
	switch {
	case e != nil:
		writeError(w, http.StatusBadRequest, e)
		return
	case arrays != "" && arrays != "collapse":
		writeError(w, http.StatusBadRequest, invalid("arrays", "%q is not a way to list arrays: give collapse (one entry an array), or leave it out (one a job)", truncateName(arrays)))
		return
	case arrays != "" && !inMemory:
		writeError(w, http.StatusBadRequest, invalid("arrays", "collapse lists jobs not ended (PENDING, HELD, ASSIGNED, RUNNING) only"))
		return
	case before > 0 && after > 0:
		writeError(w, http.StatusBadRequest, invalid("before", "give after or before, not both"))
		return
	case before > 0 && !inMemory:
		writeError(w, http.StatusBadRequest, invalid("before", "pages back through jobs that have not ended (PENDING, HELD, ASSIGNED, RUNNING); page through ended jobs with after"))
		return
	}
	// The page is read from the state's ordered index: from the cursor on, through the
	// jobs of the states asked for, stopping at the first job past the page.
	var want []api.JobState
	switch {
	case len(states) > 0:
		for st := range states {
			want = append(want, st)
		}
	case !all:
		want = []api.JobState{api.StatePending, api.StateHeld, api.StateAssigned, api.StateRunning}
	}
	queue, user := q.Get("queue"), q.Get("user")
	who := caller(r)
	s.mu.Lock()
	reads := s.readFilter(who)
	keep := func(j *api.Job) bool {
		switch {
		case queue != "" && j.Spec.Queue != queue:
			return false
		case user != "" && j.Spec.User != user:
			return false
		}
		return reads(j)
	}
	if inMemory {
		var list api.JobList
		if arrays != "" {
			list = s.collapsedPage(after, before, want, limit, keep)
		} else {
			list = s.pageInMemory(after, before, want, limit, keep)
		}
		s.mu.Unlock()
		for i := range list.Jobs {
			redactEnv(who, &list.Jobs[i])
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	jobs, more := s.state.JobsPage(after, want, limit, keep)
	s.listed(jobs)
	ev := s.evictedView()
	s.mu.Unlock()
	// keep reads nothing of the state (readFilter took what it needs), so the jobs that
	// left memory are read from the store without the lock.
	jobs, more, err := s.withEvicted(r.Context(), ev, jobs, more, endedOf(want), after, limit, queue, user, keep)
	if err != nil {
		storeError(w, "reading ended jobs", err)
		return
	}
	for i := range jobs {
		redactEnv(who, &jobs[i])
	}
	list := api.JobList{Jobs: jobs}
	if more {
		list.Next = strconv.FormatInt(jobs[limit-1].ID, 10)
	}
	writeJSON(w, http.StatusOK, list)
}

// pageInMemory reads a page of the job list from memory: the first limit jobs after the
// cursor after, or with before the last limit before it, with the cursors of the pages on
// either side where jobs come there. Callers hold s.mu.
func (s *Server) pageInMemory(after, before int64, want []api.JobState, limit int, keep func(*api.Job) bool) api.JobList {
	var list api.JobList
	var more bool
	if before > 0 {
		list.Jobs, more = s.state.JobsPageBefore(before, want, limit, keep)
	} else {
		list.Jobs, more = s.state.JobsPage(after, want, limit, keep)
	}
	if n := len(list.Jobs); n > 0 {
		later, earlier := s.pageSides(after, before, more, want, keep)
		if later {
			list.Next = strconv.FormatInt(list.Jobs[n-1].ID, 10)
		}
		if earlier {
			list.Prev = strconv.FormatInt(list.Jobs[0].ID, 10)
		}
	}
	s.listed(list.Jobs)
	return list
}

// pageSides says whether jobs of the list come after and before a page that is not
// empty, read forward from the cursor after (or from the start), or with before backward,
// whose own walk found more jobs past it (more). That side is known; on the other, every
// job between the cursor and the page would be on it, so the look for one there starts
// at the cursor, and a first page has none before it. Callers hold s.mu.
func (s *Server) pageSides(after, before int64, more bool, want []api.JobState, keep func(*api.Job) bool) (later, earlier bool) {
	switch {
	case before > 0:
		next, _ := s.state.JobsPage(before-1, want, 1, keep)
		return len(next) > 0, more
	case after > 0:
		prev, _ := s.state.JobsPageBefore(after+1, want, 1, keep)
		return more, len(prev) > 0
	}
	return more, false
}

// collapsedPage reads a page of the job list from memory in which each array is one
// entry: its first listed job, with the summary of all its listed jobs (Job.Array). The
// limit counts entries; an array is read to its end however many jobs it has, so that
// no array is split between pages (an array's jobs have consecutive IDs). The page is the
// first entries after the cursor after, or with before the last ones before it; Next is
// the last job read and Prev the first, where jobs come on that side. Callers hold s.mu.
func (s *Server) collapsedPage(after, before int64, want []api.JobState, limit int, keep func(*api.Job) bool) api.JobList {
	now := s.cfg.Clock.Now()
	back := before > 0
	jobs := s.state.EachJobAfter(after, want)
	if back {
		jobs = s.state.EachJobBefore(before, want)
	}
	var entries []api.Job                         // in the order read
	var open *api.Job                             // the last entry, while it is an array's
	first, last := int64(math.MaxInt64), int64(0) // the lowest and highest job read
	more := false
	for j := range jobs {
		if keep != nil && !keep(j) {
			continue
		}
		if open != nil && inArrayListing(j) && j.ArrayID == open.ArrayID {
			if back {
				sum := open.Array
				*open = *j // the entry is its array's first listed job
				open.Array = sum
				sum.AddEarlier(j, now)
			} else {
				open.Array.Add(j, now)
			}
			first, last = min(first, j.ID), max(last, j.ID)
			continue
		}
		if len(entries) == limit {
			more = true
			break
		}
		entries = append(entries, *j)
		open = nil
		if e := &entries[len(entries)-1]; inArrayListing(e) {
			e.Array = &api.ArraySummary{}
			e.Array.Add(j, now)
			open = e
		}
		first, last = min(first, j.ID), max(last, j.ID)
	}
	if back {
		slices.Reverse(entries)
	}
	list := api.JobList{Jobs: append([]api.Job{}, entries...)}
	if len(entries) > 0 {
		later, earlier := s.pageSides(after, before, more, want, keep)
		if later {
			list.Next = strconv.FormatInt(last, 10)
		}
		if earlier {
			list.Prev = strconv.FormatInt(first, 10)
		}
	}
	s.listed(list.Jobs)
	return list
}

// inArrayListing reports whether job j is an element of an array, shown on its array's
// entry in a listing that collapses arrays.
func inArrayListing(j *api.Job) bool { return j.ArrayID != 0 && j.ArrayIndex != nil }

// listed fills in what a listing shows of each job beyond its record. Usage is summed up
// for the listed jobs only: it costs a look at each rank's history. The deadline warning is
// given here as on the job itself, so a queue can show it. Callers hold s.mu.
func (s *Server) listed(jobs []api.Job) {
	now := s.cfg.Clock.Now()
	for i := range jobs {
		if a, ok := s.state.CurrentAttempt(jobs[i].ID); ok {
			jobs[i].Usage = s.attemptUsage(&a)
		}
		jobs[i].DeadlineWarning = deadlineWarning(&jobs[i], now)
	}
}

// jobID parses the {id} path value, answering 400 or 404 itself when it fails.
func (s *Server) jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, invalid("id", "%q is not a job ID: job IDs are positive numbers", r.PathValue("id")))
		return 0, false
	}
	return id, true
}

func notFound(w http.ResponseWriter, id int64) {
	writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: "no job " + strconv.FormatInt(id, 10)})
}

func (s *Server) handleGetJob(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	who := caller(r)
	job, attempts, found, err := s.lookupJob(r.Context(), id)
	if err != nil {
		storeError(w, "reading the job", err)
		return
	}
	s.mu.Lock()
	// The job's events come from the store: they must include the writes this copy of
	// the job was read with (writequeue.go).
	last := s.lastWrite()
	var e *api.Error
	if found {
		e = s.mayRead(who, &job)
		job.Checkpoints = s.checkpointsNote(&job)
		job.DeadlineWarning = deadlineWarning(&job, s.cfg.Clock.Now())
		if !job.State.Terminal() && job.Reason != reasonBudget {
			job.BudgetWarning = s.budgetWarning(&job.Spec)
		}
		// The current or last attempt's usage: live from memory while its ranks run,
		// from the placements once they ended.
		if n := len(attempts); n > 0 {
			job.Usage = s.attemptUsage(&attempts[n-1])
		}
	}
	s.mu.Unlock()
	if !found {
		notFound(w, id)
		return
	}
	if e != nil {
		writeError(w, http.StatusForbidden, e)
		return
	}
	redactEnv(who, &job)
	if last != nil {
		if err := last.wait(); err != nil {
			status, e := commitErrorOf("the job's last change could not be stored", err)
			writeError(w, status, e)
			return
		}
	}
	events, err := s.store.Events(r.Context(), store.EventFilter{JobID: id})
	if err != nil {
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "reading the job's events: " + err.Error()})
		return
	}
	if attempts == nil {
		attempts = []api.Attempt{}
	}
	for i := range attempts {
		attempts[i].Placements = wirePlacements(attempts[i].Placements)
	}
	writeJSON(w, http.StatusOK, api.JobDetail{Job: job, AttemptList: attempts, Events: events})
}

// wirePlacements gives a rank without GPUs empty GPU lists, not null, as the spec has
// them: placements are made, and stored, with nil lists. It copies, since ps is shared
// with the state.
func wirePlacements(ps []api.Placement) []api.Placement {
	out := slices.Clone(ps)
	for i := range out {
		if out[i].GPUIndices == nil {
			out[i].GPUIndices = []int{}
		}
		if out[i].GPUIDs == nil {
			out[i].GPUIDs = []string{}
		}
	}
	return out
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	s.actOnJob(w, r, s.cancel)
}

// jobAction changes one job in b, or says why it cannot. It returns the job as it stands
// after the change.
type jobAction func(r *http.Request, b *store.Batch, job api.Job, now time.Time) (api.Job, *api.Error)

// actOnJob runs act on the job the URL names, as its caller may, in one commit.
func (s *Server) actOnJob(w http.ResponseWriter, r *http.Request, act jobAction) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	who := caller(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	job, _, found, err := s.jobLocked(r.Context(), id)
	if err != nil {
		storeError(w, "reading the job", err)
		return
	}
	if !found {
		notFound(w, id)
		return
	}
	if e := s.mayRead(who, &job); e != nil {
		writeError(w, http.StatusForbidden, e)
		return
	}
	if e := mayAct(who, &job); e != nil {
		writeError(w, http.StatusForbidden, e)
		return
	}
	b := &store.Batch{}
	job, e := act(r, b, job, s.cfg.Clock.Now())
	if e != nil {
		writeError(w, http.StatusConflict, e)
		return
	}
	if err := s.commit(r.Context(), b); err != nil {
		commitError(w, "the change could not be stored", err)
		return
	}
	s.wake()
	redactEnv(who, &job)
	writeJSON(w, http.StatusOK, job)
}

// cancel ends a waiting job at once; an active one is stopped by its agent (notice,
// signal, grace, kill) and becomes CANCELLED when the agent reports the end, so the record
// never claims GPUs are free early.
func (s *Server) cancel(r *http.Request, b *store.Batch, job api.Job, now time.Time) (api.Job, *api.Error) {
	id := job.ID
	switch {
	case job.State.Terminal():
		return job, &api.Error{Code: api.CodeConflict, Field: "id", Message: "job " + strconv.FormatInt(id, 10) + " has already ended: " + string(job.State)}
	case job.State.Active():
		if job.CancelRequested {
			return job, nil
		}
		job.CancelRequested = true
		ev := audit(r, now, api.EventCancel, "cancel requested; stopping on %s", strings.Join(job.Nodes, ","))
		ev.JobID, ev.Attempt = id, job.Attempts
		b.Events = append(b.Events, ev)
	default:
		who := caller(r)
		ev, err := cluster.Transition(&job, api.StateCancelled, api.ReasonCancelled, "cancelled by "+who.User, who.User, now)
		if err != nil {
			return job, &api.Error{Code: api.CodeConflict, Message: err.Error()}
		}
		ev.Kind, ev.Role, ev.Source = api.EventCancel, string(who.Role), who.Source
		b.Events = append(b.Events, ev)
	}
	b.Jobs = append(b.Jobs, job)
	return job, nil
}

// handleGetArray answers every element of an array, in ID order: its ID is the ID of its
// first job. Read access is checked against that first element, whose user and team every
// element shares.
func (s *Server) handleGetArray(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	who := caller(r)
	elems, err := s.arrayElems(r.Context(), id)
	if err != nil {
		storeError(w, "reading the array", err)
		return
	}
	s.mu.Lock()
	var e *api.Error
	if len(elems) > 0 {
		e = s.mayRead(who, &elems[0])
	}
	s.mu.Unlock()
	switch {
	case len(elems) == 0:
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no array %d: an array's ID is the ID of its first job", id)})
		return
	case e != nil:
		writeError(w, http.StatusForbidden, e)
		return
	}
	for i := range elems {
		redactEnv(who, &elems[i])
	}
	writeJSON(w, http.StatusOK, api.JobList{Jobs: elems})
}

// handleArrayCancel, handleArrayHold and handleArrayRelease act on every element of an
// array: its ID is the ID of its first job. Elements the action does not apply to (a
// finished one for cancel, a started one for hold) are left as they are.
func (s *Server) handleArrayCancel(w http.ResponseWriter, r *http.Request) {
	s.actOnArray(w, r, s.cancel, func(j *api.Job) bool { return !j.State.Terminal() })
}

func (s *Server) handleArrayHold(w http.ResponseWriter, r *http.Request) {
	s.actOnArray(w, r, s.holdAction(true), waiting)
}

func (s *Server) handleArrayRelease(w http.ResponseWriter, r *http.Request) {
	s.actOnArray(w, r, s.holdAction(false), waiting)
}

func waiting(j *api.Job) bool { return j.State == api.StatePending || j.State == api.StateHeld }

func (s *Server) actOnArray(w http.ResponseWriter, r *http.Request, act jobAction, applies func(*api.Job) bool) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	who := caller(r)
	// The elements that left memory ended long ago and never change, and no action
	// applies to them: they are read from the store before the lock is taken, and only
	// what memory holds is read under it, unless jobs left memory in between.
	s.mu.Lock()
	ev := s.evictedView()
	s.mu.Unlock()
	stored, err := s.storedArray(r.Context(), ev, id)
	if err != nil {
		storeError(w, "reading the array", err)
		return
	}
	s.hookBetweenReads()
	s.mu.Lock()
	defer s.mu.Unlock()
	var elems []api.Job
	if now := s.evictedView(); now == ev {
		elems = mergeByID(s.memArray(id), stored)
	} else if elems, err = s.storedArray(r.Context(), now, id); err != nil {
		storeError(w, "reading the array", err)
		return
	} else {
		elems = mergeByID(s.memArray(id), elems)
	}
	if len(elems) == 0 {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no array %d: an array's ID is the ID of its first job", id)})
		return
	}
	// Every element has the same user and team, so the first answers for all.
	if e := s.mayRead(who, &elems[0]); e != nil {
		writeError(w, http.StatusForbidden, e)
		return
	}
	if e := mayAct(who, &elems[0]); e != nil {
		writeError(w, http.StatusForbidden, e)
		return
	}
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	out := api.JobList{Jobs: []api.Job{}}
	for _, j := range elems {
		if applies(&j) {
			if changed, e := act(r, b, j, now); e == nil {
				j = changed
			}
		}
		redactEnv(who, &j)
		out.Jobs = append(out.Jobs, j)
	}
	if err := s.commit(r.Context(), b); err != nil {
		commitError(w, "the change could not be stored", err)
		return
	}
	s.wake()
	writeJSON(w, http.StatusOK, out)
}

// fillUsage fills in what active jobs hold on node n, from u (nil when they hold
// nothing); idle says whether an active job is idle (Job.IdleSince).
func fillUsage(n *api.Node, u *cluster.NodeUsage, idle func(id int64) bool) {
	if u == nil {
		return
	}
	n.GPUsUsed, n.CPUsUsed, n.Jobs = len(u.GPUs), u.CPUs, u.Jobs
	n.UsedGPUs = slices.Sorted(maps.Keys(u.GPUs))
	n.SharedGPUs = sharedGPUs(u)
	for _, g := range n.UsedGPUs {
		if gpuIdle(u, g, idle) {
			n.IdleGPUs = append(n.IdleGPUs, g)
		}
	}
}

// gpuIdle reports whether GPU g, which active jobs hold (u), is idle: a shared GPU when
// every job that holds a share of it is, another when its job is.
func gpuIdle(u *cluster.NodeUsage, g int, idle func(id int64) bool) bool {
	if ts, shared := u.Tenants[g]; shared {
		return !slices.ContainsFunc(ts, func(t api.Tenant) bool { return !idle(t.JobID) })
	}
	return idle(u.GPUs[g])
}

// flaggedIdle says whether job id is flagged idle (Job.IdleSince), from the state.
// Callers hold s.mu.
func (s *Server) flaggedIdle(id int64) bool {
	j := s.state.Peek(id)
	return j != nil && j.IdleSince != nil
}

// sharedGPUs lists a node's shared GPUs by index, with their tenants.
func sharedGPUs(u *cluster.NodeUsage) []api.SharedGPU {
	var out []api.SharedGPU
	for idx, ts := range u.Tenants {
		g := api.SharedGPU{Index: idx, Tenants: ts}
		milli := 0
		for _, t := range ts {
			milli += cluster.MilliOf(t.Share)
			g.MemoryMB += t.MemoryMB
		}
		g.Share = float64(milli) / 1000
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b api.SharedGPU) int { return a.Index - b.Index })
	return out
}

// initialState is where a new job starts: HELD for a user hold or unmet dependencies,
// FAILED if a dependency can never be met, else PENDING.
func (s *Server) initialState(j *api.Job) (api.JobState, string, string) {
	if j.UserHold {
		return api.StateHeld, reasonUserHold, "held by its owner; rota release " + strconv.FormatInt(j.ID, 10) + " lets it run"
	}
	met, msg, never := s.depsMet(j)
	switch {
	case never:
		return api.StateFailed, reasonDependency, msg
	case !met:
		return api.StateHeld, reasonDependency, msg
	}
	return api.StatePending, "", ""
}

// Reasons for HELD jobs and jobs the server keeps out of the scheduler.
const (
	reasonUserHold   = "UserHold"
	reasonDependency = "Dependency"
	reasonArrayLimit = "ArrayLimit"
)

// depsMet reports whether the job's dependencies allow it to start, a sentence saying what
// it waits for, and whether an after-ok dependency failed so that it never can.
func (s *Server) depsMet(j *api.Job) (met bool, msg string, never bool) {
	var waiting []string
	for _, id := range j.Spec.After {
		if st, ok := s.state.StateOf(id); ok && !st.Terminal() {
			waiting = append(waiting, strconv.FormatInt(id, 10))
		}
	}
	for _, id := range j.Spec.AfterOK {
		st, ok := s.state.StateOf(id)
		switch {
		case !ok:
			continue
		case st == api.StateSucceeded:
		case st.Terminal():
			return false, fmt.Sprintf("job %d ended %s, so --after-ok %d can never be met", id, st, id), true
		default:
			waiting = append(waiting, strconv.FormatInt(id, 10))
		}
	}
	if len(waiting) > 0 {
		return false, "waits for job " + strings.Join(waiting, ", ") + " to end", false
	}
	return true, "", false
}

func (s *Server) handleHold(w http.ResponseWriter, r *http.Request) {
	s.actOnJob(w, r, s.holdAction(true))
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	s.actOnJob(w, r, s.holdAction(false))
}

// holdAction holds a waiting job, or releases it. Released, it waits again for any unmet
// dependency; held, it keeps its place in the order by its submit time.
func (s *Server) holdAction(hold bool) jobAction {
	return func(r *http.Request, b *store.Batch, job api.Job, now time.Time) (api.Job, *api.Error) {
		if job.State != api.StatePending && job.State != api.StateHeld {
			return job, &api.Error{Code: api.CodeConflict, Field: "id",
				Message: fmt.Sprintf("job %d is %s: only waiting jobs can be held or released", job.ID, job.State)}
		}
		if job.UserHold == hold {
			return job, nil
		}
		who := caller(r)
		job.UserHold = hold
		kind, verb := api.EventRelease, "released"
		if hold {
			kind, verb = api.EventHold, "held"
		}
		to, reason, msg := s.initialState(&job)
		if to != job.State {
			ev, err := cluster.Transition(&job, to, reason, msg, who.User, now)
			if err != nil {
				return job, &api.Error{Code: api.CodeConflict, Message: err.Error()}
			}
			ev.Kind, ev.Role, ev.Source = kind, string(who.Role), who.Source
			ev.Message = verb + " by " + who.User + "; " + ev.Message
			b.Events = append(b.Events, ev)
		} else {
			job.Reason, job.Message = reason, msg
			ev := audit(r, now, kind, "%s by %s; %s", verb, who.User, msg)
			ev.JobID = job.ID
			b.Events = append(b.Events, ev)
		}
		b.Jobs = append(b.Jobs, job)
		return job, nil
	}
}
