package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
)

// StoreTools are the admin commands that act on a store's file or database directly, on
// the machine they run on, rather than through a server. cmd/rota provides them: this
// package may not import the store.
type StoreTools interface {
	// Backup writes a consistent copy of the SQLite store at from (a store URL) to the new
	// file to, while a server may run on the store.
	Backup(ctx context.Context, from, to string) (StoreBackup, error)
	// Migrate copies the store at from into the empty store at to (store URLs).
	Migrate(ctx context.Context, from, to string) (StoreCopy, error)
}

// StoreTable is how many rows one table of a store holds.
type StoreTable struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
}

// StoreBackup describes a backup `rota admin backup` wrote.
type StoreBackup struct {
	From   string       `json:"from"`
	To     string       `json:"to"`
	Schema int          `json:"schema"`
	Bytes  int64        `json:"bytes"`
	Tables []StoreTable `json:"tables"`
}

// StoreCopy describes a copy `rota admin migrate` made. From and To are the store URLs
// with any password hidden.
type StoreCopy struct {
	From    string       `json:"from"`
	To      string       `json:"to"`
	Schema  int          `json:"schema"`
	Tables  []StoreTable `json:"tables"`
	Skipped []string     `json:"skipped"`
}

const backupUsage = `rota admin backup [--store URL | --data-dir DIR] --to FILE

Writes a consistent copy of a SQLite store to FILE, a new file, while the server runs: run
it on the server's machine. The copy holds every change the server acknowledged before the
backup began, and a server starts on it as on the original (docs/operations.md). It never
overwrites a file. The store is --store, else rota.db in --data-dir, as for rota server.
A PostgreSQL store is backed up with pg_dump instead.`

const migrateUsage = `rota admin migrate --from URL --to URL

Copies every row of the store at --from into the empty store at --to, from SQLite to
PostgreSQL or back (sqlite:///path/rota.db, postgres://user@host/db). Stop the servers on
the source first. The target must be empty (a new SQLite file is created); it gets the
schema and all rows in one transaction, and the rows of each table are counted on both
sides before it commits, so a copy that fails writes nothing (docs/operations.md).`

// newStoreFlagSet makes the flag set of a command that runs without a server: it has -o
// but none of the flags that name a server.
func newStoreFlagSet(cfg Config, cmd, usage string) (*flag.FlagSet, *globalFlags) {
	fs := flag.NewFlagSet("rota "+cmd, flag.ContinueOnError)
	fs.SetOutput(cfg.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(cfg.Stderr, "usage: %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	if cfg.onFlagSet != nil {
		cfg.onFlagSet(fs)
	}
	g := &globalFlags{}
	fs.StringVar(&g.output, "o", "table", "output `format`: table or json")
	fs.StringVar(&g.output, "output", "table", "output `format`: table or json (same as -o)")
	return fs, g
}

// defaultDataDir is the data directory rota server uses when given none.
func (cfg Config) defaultDataDir() string {
	if d := cfg.Getenv("ROTA_DATA_DIR"); d != "" {
		return d
	}
	if home := cfg.Getenv("HOME"); home != "" {
		return filepath.Join(home, ".rota")
	}
	return ".rota"
}

var errNoStoreTools = errors.New("this rota binary was built without the store commands")

func runBackup(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin backup"
	fs, g := newStoreFlagSet(cfg, cmd, backupUsage)
	store := fs.String("store", "", "store `URL` to back up: sqlite://PATH (default: rota.db in --data-dir)")
	dataDir := fs.String("data-dir", cfg.defaultDataDir(), "the server's data `directory`, whose rota.db is backed up when --store is not given")
	to := fs.String("to", "", "the `file` to write: a new file, in a directory that exists")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	if strings.TrimSpace(*to) == "" {
		return cfg.usageError(cmd, "--to: name the file to write the backup to")
	}
	from := *store
	if from == "" {
		if strings.TrimSpace(*dataDir) == "" {
			return cfg.usageError(cmd, "--data-dir: empty; name the server's data directory, or the store with --store")
		}
		from = "sqlite://" + filepath.Join(*dataDir, "rota.db")
	}
	if cfg.Binary.Store == nil {
		return cfg.fail(ctx, errNoStoreTools)
	}
	res, err := cfg.Binary.Store.Backup(ctx, from, *to)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	res.Tables = orEmpty(res.Tables)
	if g.output == "json" {
		return cfg.printJSON(res)
	}
	fmt.Fprintf(cfg.Stdout, "Backed up %s to %s (schema %d, %s).\n\n", res.From, res.To, res.Schema, formatBytes(res.Bytes))
	return cfg.printTableCounts(ctx, res.Tables)
}

func runMigrate(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin migrate"
	fs, g := newStoreFlagSet(cfg, cmd, migrateUsage)
	from := fs.String("from", "", "the store `URL` to copy: sqlite://PATH or postgres://…")
	to := fs.String("to", "", "the empty store `URL` to copy into: sqlite://PATH (a new file) or postgres://…")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	for _, f := range []struct{ name, value string }{{"--from", *from}, {"--to", *to}} {
		v := strings.TrimSpace(f.value)
		switch {
		case v == "":
			return cfg.usageError(cmd, "%s: name a store URL: sqlite:///path/rota.db or postgres://user@host/db", f.name)
		case !strings.Contains(v, "://"):
			return cfg.usageError(cmd, "%s: %q is not a store URL: want sqlite:///path/rota.db or postgres://user@host/db", f.name, v)
		case !strings.HasPrefix(v, "sqlite://") && !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://"):
			scheme, _, _ := strings.Cut(v, "://")
			return cfg.usageError(cmd, "%s: unknown kind of store %q: want sqlite:///path/rota.db or postgres://user@host/db", f.name, scheme)
		}
	}
	if cfg.Binary.Store == nil {
		return cfg.fail(ctx, errNoStoreTools)
	}
	res, err := cfg.Binary.Store.Migrate(ctx, *from, *to)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	res.Tables, res.Skipped = orEmpty(res.Tables), orEmpty(res.Skipped)
	if g.output == "json" {
		return cfg.printJSON(res)
	}
	fmt.Fprintf(cfg.Stdout, "Copied %s to %s (schema %d); every table's rows counted equal on both sides.\n\n", res.From, res.To, res.Schema)
	code := cfg.printTableCounts(ctx, res.Tables)
	if len(res.Skipped) > 0 && code == ExitOK {
		fmt.Fprintf(cfg.Stdout, "\nNot copied: %s (they describe the servers, not the cluster; the target starts them afresh).\n", strings.Join(res.Skipped, ", "))
	}
	return code
}

func (cfg Config) printTableCounts(ctx context.Context, tables []StoreTable) int {
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "TABLE\tROWS")
	for _, t := range tables {
		fmt.Fprintf(tw, "%s\t%d\n", t.Table, t.Rows)
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// formatBytes prints a file size: 812 B, 3.4 MB.
func formatBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
