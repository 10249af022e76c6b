package cli

import (
	"strings"
	"testing"
)

// TestStoreCommandsUsage checks that rota admin backup and migrate name the flag at
// fault, with exit 2, before they touch any store.
func TestStoreCommandsUsage(t *testing.T) {
	tr := testRun{env: map[string]string{"HOME": t.TempDir()}}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backup"}, "rota admin backup: --to: name the file to write the backup to\n"},
		{[]string{"backup", "--to", "  "}, "rota admin backup: --to: name the file to write the backup to\n"},
		{[]string{"backup", "--to", "b.db", "extra"}, "rota admin backup: unexpected argument \"extra\"\n"},
		{[]string{"backup", "--to", "b.db", "--data-dir", ""}, "rota admin backup: --data-dir: empty; name the server's data directory, or the store with --store\n"},
		{[]string{"migrate", "--to", "sqlite:///tmp/x.db"}, "rota admin migrate: --from: name a store URL: sqlite:///path/rota.db or postgres://user@host/db\n"},
		{[]string{"migrate", "--from", "sqlite:///tmp/x.db"}, "rota admin migrate: --to: name a store URL: sqlite:///path/rota.db or postgres://user@host/db\n"},
		{[]string{"migrate", "--from", "mysql://db/rota", "--to", "sqlite:///tmp/x.db"}, "rota admin migrate: --from: unknown kind of store \"mysql\": want sqlite:///path/rota.db or postgres://user@host/db\n"},
		{[]string{"migrate", "--from", "sqlite:///tmp/x.db", "--to", "/tmp/y.db"}, "rota admin migrate: --to: \"/tmp/y.db\" is not a store URL: want sqlite:///path/rota.db or postgres://user@host/db\n"},
	} {
		code, out, errOut := tr.run(t, "admin", tc.args...)
		if code != ExitUsage || out != "" || errOut != tc.want {
			t.Errorf("rota admin %s: exit %d, stdout %q\nstderr %q\nwant   %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	// Under -o json the complaint is JSON too.
	code, _, errOut := tr.run(t, "admin", "migrate", "-o", "json", "--from", "x")
	if code != ExitUsage || !strings.Contains(errOut, `"code":"usage"`) || !strings.Contains(errOut, `--from: \"x\" is not a store URL`) {
		t.Errorf("rota admin migrate -o json with a bad --from: exit %d, stderr %q", code, errOut)
	}
	// -h lists the command's own flags and none that name a server: it asks none.
	code, _, errOut = tr.run(t, "admin", "backup", "-h")
	if code != ExitOK || !strings.Contains(errOut, "-to file") || strings.Contains(errOut, "-server") {
		t.Errorf("rota admin backup -h: exit %d\n%s", code, errOut)
	}
}
