package store

import (
	"context"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
	"github.com/rotahq/rota/internal/cluster"
)

func fullRequest(id int64) api.Request {
	start, end, decided := t0.Add(time.Hour), t0.Add(49*time.Hour), t0.Add(time.Minute)
	return api.Request{ID: id, Kind: api.RequestQuota, User: "mia", Team: "ml", State: api.RequestApproved, Reason: "paper deadline",
		Created: t0, Expires: t0.Add(72 * time.Hour), GPUModel: "H100", Limit: 12, Queue: "urgent", GPUs: 16, Pool: "train", For: 172800,
		Start: &start, End: &end, DecidedBy: "olga", Decided: &decided, Note: "ok", Previous: &api.Quota{Guaranteed: 4, Limit: 8},
		Reservation: 3, Nodes: []string{"n1", "n2"}, Message: "limit raised from 8 to 12"}
}

// Requests are kept as settings (see cluster.RequestSetting): every field comes back, a
// later step of the same request replaces the earlier, and both survive reopening the store.
func testRequests(t *testing.T, url string) {
	checkAllSet(t, "Request", fullRequest(2))
	s := openStore(t, url)
	pending := api.Request{ID: 1, Kind: api.RequestQueue, User: "mia", Team: "ml", State: api.RequestPending, Reason: "prod down",
		Created: t0, Expires: t0.Add(72 * time.Hour), Queue: "urgent", For: 86400}
	commit(t, s, &Batch{Settings: []Setting{cluster.RequestSetting(fullRequest(2)), cluster.RequestSetting(pending)}})
	denied := pending
	denied.State, denied.DecidedBy, denied.Note = api.RequestDenied, "olga", "no"
	commit(t, s, &Batch{Settings: []Setting{cluster.RequestSetting(denied)}})
	s.Close()

	s = openStore(t, url)
	settings, err := s.LoadSettings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st := cluster.New()
	b := &batch.Batch{}
	for name, data := range settings {
		b.Settings = append(b.Settings, Setting{Name: name, Data: data})
	}
	st.Apply(b)
	equal(t, "requests", st.Requests(), []api.Request{denied, fullRequest(2)})
	if id := st.NextRequestID(); id != 3 {
		t.Errorf("next request ID %d; want 3", id)
	}
}
