package agent

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// stopSignals are the signals a job may ask to be warned with. The list is short on purpose:
// these are the ones that mean "stop soon" to common runtimes and launchers.
var stopSignals = map[string]syscall.Signal{
	"HUP":  syscall.SIGHUP,
	"INT":  syscall.SIGINT,
	"QUIT": syscall.SIGQUIT,
	"KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
	"TERM": syscall.SIGTERM,
}

// parseSignal accepts "SIGTERM", "TERM", "sigterm" or a number; empty means SIGTERM.
func parseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if name == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		for _, sig := range stopSignals {
			if int(sig) == n {
				return sig, nil
			}
		}
		return 0, fmt.Errorf("signal %d is not one of HUP, INT, QUIT, KILL, USR1, USR2, TERM", n)
	}
	if sig, ok := stopSignals[strings.TrimPrefix(name, "SIG")]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q: want one of HUP, INT, QUIT, KILL, USR1, USR2, TERM", s)
}
