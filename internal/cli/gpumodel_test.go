package cli

import (
	"strings"
	"testing"
)

// A list of models goes to the server as given, and the help says what it means.
func TestSubmitModelList(t *testing.T) {
	srv := newFakeServer(t)
	code, _, errOut := run(t, srv.URL, "submit", "--gpus", "2", "--gpu-model", "A100,H100", "--", "python", "t.py")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if srv.spec.GPUModel != "A100,H100" {
		t.Errorf("server got gpu_model %q; want A100,H100", srv.spec.GPUModel)
	}
	code, out, errOut := run(t, srv.URL, "submit", "-h")
	help := out + errOut
	if code != ExitOK || !strings.Contains(help, "e.g. A100,H100") || !strings.Contains(help, "whichever starts first") {
		t.Errorf("submit -h: exit %d, help %q; want --gpu-model's list explained", code, help)
	}
}
