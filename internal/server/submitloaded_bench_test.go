package server

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// BenchmarkSubmitLoaded measures durable submits from 64 clients into a server that holds
// 10,000 nodes running 35,000 jobs with 69,000 more waiting, as the scale suite's, but
// with no heartbeat or scheduling cycle beside them: what a submit itself costs at size.
func BenchmarkSubmitLoaded(b *testing.B) {
	// The nodes send no heartbeats: they must not be judged silent while it runs.
	env := benchServer(b, func(c *Config) { c.NotReadyAfter = time.Hour })
	benchFill(b, env, 10000, 8, 69000)
	spec := api.JobSpec{Command: []string{"true"}, User: "bench", GPUs: 1}
	const clients = 64
	for _, cycles := range []bool{false, true} {
		b.Run(fmt.Sprintf("clients=%d/cycles=%v", clients, cycles), func(b *testing.B) {
			if cycles {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go env.srv.Run(ctx)
			}
			b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				for pb.Next() {
					if err := post(client, env.hs.URL+"/api/v1/jobs", env.token, spec, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
		})
	}
}
