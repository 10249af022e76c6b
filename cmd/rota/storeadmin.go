package main

import (
	"context"

	"github.com/rotahq/rota/internal/cli"
	"github.com/rotahq/rota/internal/store"
)

// storeTools runs `rota admin backup` and `rota admin migrate` with the store package,
// which internal/cli may not import.
type storeTools struct{}

func (storeTools) Backup(ctx context.Context, from, to string) (cli.StoreBackup, error) {
	res, err := store.Backup(ctx, from, to)
	if err != nil {
		return cli.StoreBackup{}, err
	}
	return cli.StoreBackup{From: res.From, To: res.To, Schema: res.Schema, Bytes: res.Bytes, Tables: tableCounts(res.Tables)}, nil
}

func (storeTools) Migrate(ctx context.Context, from, to string) (cli.StoreCopy, error) {
	res, err := store.Copy(ctx, from, to, nil)
	if err != nil {
		return cli.StoreCopy{}, err
	}
	return cli.StoreCopy{From: redact(from), To: redact(to), Schema: res.Schema, Tables: tableCounts(res.Tables), Skipped: res.Skipped}, nil
}

func tableCounts(ts []store.TableCount) []cli.StoreTable {
	out := make([]cli.StoreTable, len(ts))
	for i, t := range ts {
		out[i] = cli.StoreTable{Table: t.Table, Rows: t.Rows}
	}
	return out
}
