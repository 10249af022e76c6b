package server

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// countingLock is a sync.Mutex that counts the times it is taken.
type countingLock struct {
	sync.Mutex
	taken int // guarded by the Mutex itself: counted once it is held
}

func (l *countingLock) Lock() { l.Mutex.Lock(); l.taken++ }

// queued waits until c has n callers waiting.
func queued(t *testing.T, c *combiner, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		k := len(c.queue)
		c.mu.Unlock()
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", k, n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestCombinerRunsEachOnceUnderTheLock: every critical section runs exactly once, with the
// lock held, none at the same time as another, from many goroutines at once.
func TestCombinerRunsEachOnceUnderTheLock(t *testing.T) {
	var c combiner
	var l countingLock
	const goroutines, each = 16, 500
	count := 0 // not atomic: only the lock keeps it right
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				c.run(&l, func() {
					if l.TryLock() {
						t.Error("a critical section ran without the lock held")
						l.Unlock()
					}
					count++
				})
			}
		})
	}
	wg.Wait()
	if count != goroutines*each {
		t.Fatalf("%d critical sections ran, want %d", count, goroutines*each)
	}
	if c.running || len(c.queue) != 0 {
		t.Fatalf("after every caller returned: running %v, %d queued", c.running, len(c.queue))
	}
	if !l.TryLock() {
		t.Fatal("the lock is still held after every caller returned")
	}
}

// TestCombinerRunsQueuedInOneHold: callers that queue while one holds the lock are run by
// it, in the order they queued, with no hand-off of the lock between them; after
// combineMax of them it runs no more, and the first still waiting takes the lock and runs
// the rest, so that no caller's answer waits long on others'.
func TestCombinerRunsQueuedInOneHold(t *testing.T) {
	for _, c := range []struct{ queued, taken int }{{3, 1}, {combineMax, 1}, {combineMax + 2, 2}} {
		t.Run(fmt.Sprint(c.queued), func(t *testing.T) {
			var cb combiner
			var l countingLock
			release := make(chan struct{})
			var wg sync.WaitGroup
			var ran []int
			wg.Go(func() {
				cb.run(&l, func() { ran = append(ran, 0); <-release })
			})
			waitRunning(&cb)
			for i := 1; i <= c.queued; i++ {
				wg.Go(func() { cb.run(&l, func() { ran = append(ran, i) }) })
				queued(t, &cb, i)
			}
			close(release)
			wg.Wait()
			if len(ran) != c.queued+1 {
				t.Fatalf("%d ran, want %d", len(ran), c.queued+1)
			}
			for i, v := range ran {
				if v != i {
					t.Fatalf("ran %v, want 0 to %d: the first, then the others in the order they queued", ran, c.queued)
				}
			}
			if l.taken != c.taken {
				t.Fatalf("the lock was taken %d times, want %d", l.taken, c.taken)
			}
		})
	}
}

// waitRunning waits until a goroutine holds the lock and runs what queues.
func waitRunning(c *combiner) {
	for !func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.running }() {
		time.Sleep(100 * time.Microsecond)
	}
}

// TestCombinerPanicGoesToItsCaller: a critical section that panics, run by another
// goroutine, panics in its own caller; the goroutine that ran it goes on, and the lock is
// let go.
func TestCombinerPanicGoesToItsCaller(t *testing.T) {
	var c combiner
	var l countingLock
	release := make(chan struct{})
	var wg sync.WaitGroup
	var firstPanicked, secondPanic any
	after := false
	wg.Go(func() {
		defer func() { firstPanicked = recover() }()
		c.run(&l, func() { <-release })
	})
	waitRunning(&c)
	wg.Go(func() {
		defer func() { secondPanic = recover() }()
		c.run(&l, func() { panic("bad report") })
	})
	queued(t, &c, 1)
	wg.Go(func() { c.run(&l, func() { after = true }) })
	queued(t, &c, 2)
	close(release)
	wg.Wait()
	if firstPanicked != nil {
		t.Fatalf("the goroutine that ran another's critical section panicked: %v", firstPanicked)
	}
	if secondPanic != "bad report" {
		t.Fatalf("the caller whose critical section panicked got %v, want its panic", secondPanic)
	}
	if !after {
		t.Fatal("the critical section queued after the one that panicked did not run")
	}
	if !l.TryLock() {
		t.Fatal("the lock is still held")
	}
	l.Unlock()
	// And the combiner still works.
	c.run(&l, func() { after = false })
	if after {
		t.Fatal("a later call did not run")
	}
}
