package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// BenchmarkSubmitLoaded measures durable submits from 64 clients into a server that holds
// 10,000 full nodes of 8 GPUs running 80,000 jobs, with 69,000 more waiting: first with
// nothing else running, what a submit itself costs at that size; then with the scheduling
// loop running beside them, as in production (no heartbeats either way).
func BenchmarkSubmitLoaded(b *testing.B) {
	// The nodes send no heartbeats: they must not be judged silent while it runs.
	env := benchServer(b, func(c *Config) { c.NotReadyAfter = time.Hour })
	benchFill(b, env, 10000, 8, 69000)
	const clients = 64
	for _, loop := range []bool{false, true} {
		b.Run(fmt.Sprintf("clients=%d/cycles=%v", clients, loop), func(b *testing.B) {
			if loop {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go env.srv.Run(ctx)
			}
			benchSubmits(b, env, clients, api.JobSpec{Command: []string{"true"}, User: "bench", GPUs: 1})
		})
	}
}
