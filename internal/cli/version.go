package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is rota's version. A release build sets it with
// -ldflags "-X github.com/rotahq/rota/internal/cli.Version=v1.2.3"; empty, it is the main
// module's version from the build information, else "devel".
var Version string

const versionUsage = `rota version [-o json]

Prints rota's version, the commit it was built from (and whether the tree had changes),
the Go version and platform, and the store schema version this binary migrates a
database to. It asks no server: no API route reports the server's version.`

// buildInfo is what `rota version` reports.
type buildInfo struct {
	Version string `json:"version"`
	// Commit and Modified are there when the binary was built with go build from a git
	// checkout.
	Commit      string `json:"commit,omitempty"`
	Modified    bool   `json:"modified,omitempty"`
	GoVersion   string `json:"go_version"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	StoreSchema int    `json:"store_schema"`
}

// readBuildInfo fills a buildInfo from Version, the binary's build information and bin.
func readBuildInfo(bin Binary) buildInfo {
	b := buildInfo{Version: Version, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		StoreSchema: bin.StoreSchema}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if b.Version == "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		b.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

func runVersion(ctx context.Context, cfg Config, args []string) int {
	const cmd = "version"
	fs, g := newFlagSet(cfg, cmd, versionUsage)
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	b := readBuildInfo(cfg.Binary)
	if g.output == "json" {
		return cfg.printJSON(b)
	}
	commit := "unknown (not built by go build from a git checkout)"
	if b.Commit != "" {
		commit = b.Commit
		if b.Modified {
			commit += " (modified)"
		}
	}
	schema := "unknown"
	if b.StoreSchema > 0 {
		schema = fmt.Sprint(b.StoreSchema)
	}
	tw := newTable(cfg.Stdout)
	fmt.Fprintf(tw, "rota:\t%s\n", b.Version)
	fmt.Fprintf(tw, "commit:\t%s\n", commit)
	fmt.Fprintf(tw, "go:\t%s %s/%s\n", b.GoVersion, b.OS, b.Arch)
	fmt.Fprintf(tw, "store schema:\t%s\n", schema)
	fmt.Fprintf(tw, "server:\tnot asked\n")
	tw.Flush()
	return ExitOK
}
