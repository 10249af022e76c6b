package store

import "testing"

func TestSchemaVersionIsTheLastMigration(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	v, err := SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v == 0 || v != ms[len(ms)-1].version {
		t.Errorf("SchemaVersion() = %d, want the last migration's version %d", v, ms[len(ms)-1].version)
	}
}
