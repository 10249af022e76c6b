package sched

import (
	"reflect"
	"testing"
	"time"
)

func TestOptionsFor(t *testing.T) {
	for _, name := range PolicyNames() {
		o, err := OptionsFor(name)
		if err != nil {
			t.Fatalf("OptionsFor(%q): %v", name, err)
		}
		if _, err := ScheduleWith(snapshot(nil, nil), t0, o); err != nil {
			t.Errorf("policy %q does not schedule: %v", name, err)
		}
	}
	tests := []struct {
		name string
		want func(Options) bool
	}{
		{"default", func(o Options) bool { return reflect.DeepEqual(o, DefaultOptions()) }},
		{"fifo", func(o Options) bool { return o.Order == OrderFIFO && o.Placement == PlacementBestFit }},
		{"sjf", func(o Options) bool { return o.Order == OrderSJF }},
		{"las", func(o Options) bool { return o.Order == OrderLAS }},
		{"worstfit", func(o Options) bool { return o.Order == OrderPriority && o.Placement == PlacementWorstFit }},
		{"fifo+worstfit", func(o Options) bool { return o.Order == OrderFIFO && o.Placement == PlacementWorstFit }},
		{"greedy", func(o Options) bool { return o.ReservationDepth < 0 }},
		{"fifo-strict", func(o Options) bool { return o.Order == OrderFIFO && o.NoBackfill }},
		{"las+nobackfill", func(o Options) bool { return o.Order == OrderLAS && o.NoBackfill }},
	}
	for _, tt := range tests {
		o, err := OptionsFor(tt.name)
		if err != nil || !tt.want(o) {
			t.Errorf("OptionsFor(%q) = %+v, %v", tt.name, o, err)
		}
	}
	if _, err := OptionsFor("lottery"); err == nil {
		t.Error("OptionsFor accepted an unknown policy")
	}
	if _, err := ScheduleWith(snapshot(nil, nil), t0, Options{Order: "random"}); err == nil {
		t.Error("ScheduleWith accepted an unknown order")
	}
	if _, err := ScheduleWith(snapshot(nil, nil), t0, Options{LASThresholds: []time.Duration{time.Hour, time.Minute}}); err == nil {
		t.Error("ScheduleWith accepted descending LAS thresholds")
	}
}
