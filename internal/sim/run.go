package sim

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// Run replays w once per policy, the policies side by side on identical input, and returns
// their results in the order given. Replays are independent and run concurrently, up to
// GOMAXPROCS at a time; each is deterministic, so the results do not depend on how they
// interleave.
func Run(ctx context.Context, w *Workload, cfg Config, policies []string) ([]*Result, error) {
	if w.fill > 0 {
		// Fill runs place tasks that never end; the replay engine does not run them.
		return nil, errors.New("a fill workload runs with RunFill, not Run")
	}
	plans := make([]planFunc, len(policies))
	for i, p := range policies {
		f, err := plannerFor(p)
		if err != nil {
			return nil, err
		}
		plans[i] = f
	}
	return runWith(ctx, w, cfg, policies, plans)
}

func runWith(ctx context.Context, w *Workload, cfg Config, policies []string, plans []planFunc) ([]*Result, error) {
	engines := make([]*engine, len(policies))
	for i := range policies {
		e, err := newEngine(w, cfg, policies[i], plans[i])
		if err != nil {
			return nil, err
		}
		engines[i] = e
	}
	results := make([]*Result, len(policies))
	errs := make([]error, len(policies))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, e := range engines {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := e.run(ctx); err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", e.policy, err)
				return
			}
			results[i] = e.result()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}
