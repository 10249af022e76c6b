//go:build !cgo

package agent

import (
	"log/slog"
	"time"
)

// NVMLDevices stands in for the NVML discovery in a build without cgo, which cannot load
// the NVML library; such an agent runs CPU-only jobs or fake GPUs.
type NVMLDevices struct{}

// OpenNVML returns the stand-in; logger is unused.
func OpenNVML(logger *slog.Logger) *NVMLDevices { return &NVMLDevices{} }

// Close does nothing.
func (*NVMLDevices) Close() error { return nil }

// Discover reports no GPUs and why.
func (*NVMLDevices) Discover() (Discovery, error) {
	return Discovery{Source: SourceNone, Reason: "NVML not available: agent built without cgo"}, nil
}

// Sample reads nothing: there are no GPUs.
func (*NVMLDevices) Sample() (Sample, error) { return Sample{Time: time.Now()}, nil }

// HealthEvents reports nothing: there are no GPUs.
func (*NVMLDevices) HealthEvents() ([]HealthEvent, error) { return nil, nil }
