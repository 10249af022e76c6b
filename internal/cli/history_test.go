package cli

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// History follows the server's pages to the end, each from the cursor the last gave,
// with the window on every page; a server that repeats a cursor is an error, not a loop.
func TestHistoryFollowsPages(t *testing.T) {
	var queries []string
	repeat := false
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/history", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		queries = append(queries, q.Encode())
		after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
		var page api.HistoryList
		for id := after + 1; id <= min(after+2, 5); id++ {
			page.Records = append(page.Records, api.HistoryRecord{ID: id})
		}
		if after+2 < 5 {
			page.Next = strconv.FormatInt(after+2, 10)
		}
		if repeat {
			page.Next = "2"
		}
		writeJSON(w, http.StatusOK, page)
	})
	c, err := NewClient(Endpoint{Server: newHTTPServer(t, mux)})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	list, err := c.History(context.Background(), since, since.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range list.Records {
		ids = append(ids, r.ID)
	}
	if len(ids) != 5 || ids[0] != 1 || ids[4] != 5 || list.Next != "" {
		t.Fatalf("records %v, next %q; want 1 to 5 and no cursor", ids, list.Next)
	}
	if len(queries) != 3 || strings.Contains(queries[0], "after") || !strings.Contains(queries[1], "after=2") || !strings.Contains(queries[2], "after=4") {
		t.Errorf("queries %q; want three pages, from no cursor, 2 and 4", queries)
	}
	for _, q := range queries {
		if !strings.Contains(q, "since=2026-11-01") || !strings.Contains(q, "until=2026-11-02") {
			t.Errorf("query %q lost the window", q)
		}
	}
	repeat = true
	if _, err := c.History(context.Background(), since, time.Time{}); err == nil || !strings.Contains(err.Error(), "repeated") {
		t.Errorf("a repeated cursor: %v; want an error", err)
	}
}
