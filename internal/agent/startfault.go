package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// An attempt's supervisor is a process the agent starts (rota supervise). Starting it can
// fail for reasons of the node's, never of the job's: the binary was removed or replaced
// by one that cannot run, the node is out of processes or memory (fork: EAGAIN, ENOMEM).
// Each job sent to such a node would fail with a start error, one after another, and
// empty the queue into FAILED. So a supervisor that cannot be started ends its attempt
// with reason node_error (requeued without spending the job's retries), and the node
// takes no new work until a probe of the supervisor command starts a process again.
//
// By default the agent starts supervisors from its own executable as the kernel holds it
// (selfExe), not from its path: a binary removed from under a running agent, or replaced
// by a package upgrade before the agent is restarted, leaves its supervisors of the same
// release as the agent.

// selfExe is the agent's own executable for as long as the process runs, even when the
// file at its path is gone.
const selfExe = "/proc/self/exe"

// nodeFault is one cause for which this node's agent cannot run attempts: why, or empty
// while it can. It takes no lock: the runner reports a fault with the agent's lock held.
type nodeFault struct{ p atomic.Pointer[string] }

func (f *nodeFault) get() string {
	if p := f.p.Load(); p != nil {
		return *p
	}
	return ""
}

// set keeps problem and, when it changes, logs it (begins or ends) and sends a heartbeat
// at once.
func (f *nodeFault) set(a *Agent, problem, begins, ends string) {
	was := f.p.Swap(&problem)
	if was != nil && *was == problem || was == nil && problem == "" {
		return
	}
	if problem != "" {
		a.logger.Error(begins, "problem", problem)
	} else {
		a.logger.Info(ends)
	}
	a.poke()
}

// cannotRun says why this node cannot run attempts, for the heartbeat's DataDirProblem
// (the field's name is older than its second cause): the data dir first, as a supervisor
// that cannot start may only be its symptom.
func (a *Agent) cannotRun() string {
	if p := a.dataDirProblem.get(); p != "" {
		return p
	}
	return a.supervisorProblem.get()
}

func (a *Agent) setSupervisorProblem(problem string) {
	a.supervisorProblem.set(a, problem, "this node takes no new work: it cannot start attempts' supervisors", "supervisors start again; this node takes new work")
}

// supervisorFault is the end of an attempt whose supervisor could not be started, and the
// note the agent keeps of it until a probe starts the supervisor command again.
func (a *Agent) supervisorFault(err error) (reason, message string) {
	a.setSupervisorProblem("it " + err.Error())
	return api.ReasonNodeError, "this node could not start the attempt's supervisor (" + err.Error() + "); it takes no new work until it can, and the job is requeued"
}

// supervisorCommand is the command that starts supervisors (Config.SupervisorCommand,
// or rota supervise from this executable), checked to be there, and the path to execute
// it from: the command's own, or selfExe where it is this executable.
func supervisorCommand(configured []string) (cmd []string, path string, err error) {
	if len(configured) > 0 {
		p, err := exec.LookPath(configured[0])
		if err != nil {
			return nil, "", fmt.Errorf("supervisor command: %w", err)
		}
		return configured, p, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("supervisor command: %w", err)
	}
	path = exe
	if _, err := os.Stat(selfExe); err == nil {
		path = selfExe
	}
	return []string{exe, "supervise"}, path, nil
}

// startError is err, from starting the supervisor command, as the attempt's end and the
// node's problem say it.
func (r *runner) startError(err error) error {
	return fmt.Errorf("cannot start the supervisor %q: %w", r.supervisor[0], err)
}

// supervisorProbeArg makes rota supervise exit at once with status 0: a probe that the
// supervisor command starts.
const supervisorProbeArg = "--probe"

// probeWait bounds how long a probe waits for the probed process to exit.
const probeWait = 10 * time.Second

// probeSupervisor starts the supervisor command as a probe and says why it cannot be
// started, or "" when it can.
func (r *runner) probeSupervisor(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.supervisorPath, append(slices.Clone(r.supervisor[1:]), supervisorProbeArg)...)
	cmd.Args[0] = r.supervisor[0]
	cmd.Dir = "/"
	cmd.Env = r.supervisorEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "it " + r.startError(err).Error()
	}
	// The process started, which is all a supervisor needs of the node; how it exits is
	// the probe's own business (a wrapper may not know the argument).
	_ = cmd.Wait()
	return ""
}
