package cluster

import (
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Jobs that ended long enough ago leave memory (the server's KeepEnded): the store holds
// them whole, and readers ask it for them. Of each, the state keeps only its final state,
// which a dependency on it needs every cycle and which never changes; its fair-share usage
// was charged while it ran, or is charged at load by ChargeEnded.
//
// Eviction changes no job: it does not move the change sequence, so it makes no
// scheduling cycle, and a plan made before it is no less current after it (no plan
// places or preempts an ended job).

// Evict drops from memory the jobs that ended before before, and returns how many it
// dropped. Afterwards EvictedBefore returns before (or a later cutoff it was given).
func (s *State) Evict(before time.Time) int {
	n := 0
	for id, j := range s.jobs {
		if !j.State.Terminal() || j.EndTime == nil || !j.EndTime.Before(before) {
			continue
		}
		s.forget(id, j.State)
		delete(s.jobs, id)
		delete(s.attempts, id)
		delete(s.jobSeq, id)
		s.forgetSnapJob(id)
		delete(s.jobNodes, id) // an ended job holds nothing, but leave no entry behind
		s.holdGPUs(id, nil)
		delete(s.unstarted, id)
		n++
	}
	if before.After(s.evictedBefore) {
		s.evictedBefore = before
	}
	if n > 0 {
		s.jobIdx.rebuild(s.jobs)
	}
	return n
}

// Forget records a job that ended before the state was loaded and is left in the store:
// its final state, for the dependencies on it. before is the cutoff the load used.
func (s *State) Forget(id int64, final api.JobState, before time.Time) {
	s.forget(id, final)
	if id > s.maxID {
		s.maxID = id
	}
	if before.After(s.evictedBefore) {
		s.evictedBefore = before
	}
}

func (s *State) forget(id int64, final api.JobState) {
	if s.ended == nil {
		s.ended = map[int64]api.JobState{}
	}
	s.ended[id] = final
}

// ChargeEnded charges team's fair share with attempt a of a job left in the store, as Apply
// would have when it ended.
func (s *State) ChargeEnded(team string, a api.Attempt) {
	start, gpus := attemptStart(a), attemptGPUs(a)
	if a.EndTime == nil || !a.EndTime.After(start) {
		return
	}
	fs := s.fairShare()
	fs.Hold(team, gpus, start)
	fs.Hold(team, -gpus, *a.EndTime)
}

// Evicted reports whether job id ended and is no longer held in memory, and its final
// state: the store has the rest.
func (s *State) Evicted(id int64) (api.JobState, bool) {
	st, ok := s.ended[id]
	return st, ok
}

// EvictedBefore returns the latest cutoff of Evict or Forget: every job that ended before
// it, and is not held in memory, is Evicted. Zero when none has run.
func (s *State) EvictedBefore() time.Time { return s.evictedBefore }

// JobCount returns how many jobs memory holds; EvictedCount how many it has let go.
func (s *State) JobCount() int { return len(s.jobs) }

// EvictedCount returns how many ended jobs live only in the store.
func (s *State) EvictedCount() int { return len(s.ended) }

// StateOf returns the state of job id, held in memory or evicted; false when there is
// no such job.
func (s *State) StateOf(id int64) (api.JobState, bool) {
	if j, ok := s.jobs[id]; ok {
		return j.State, true
	}
	return s.Evicted(id)
}
