package server

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// Access control lives in this file, in two layers:
//
//   - each route names a rule (the route table in server.go), checked before its handler
//     runs: who may call the route at all;
//   - routes about one job then check the object rules below (mayRead, mayAct, mayReadLogs,
//     maySeeEnv): whose job it may be.
//
// TestAccessTable calls every route in every role and checks the answer against this file.

// rule names who may call a route.
type rule string

const (
	// rulePublic needs no credentials: health, and the join, whose token is its credential.
	rulePublic rule = "public"
	// ruleAgent admits a node's agent (its client certificate, or the agent inside
	// `rota up`), for its own node only.
	ruleAgent rule = "agent"
	// ruleAnyone admits any person or script with credentials (whoami, their own tokens).
	ruleAnyone rule = "authenticated"
	// ruleViewer and up read cluster state and job summaries.
	ruleViewer rule = "viewer"
	// ruleMember and up submit jobs and act on their own.
	ruleMember rule = "member"
	// ruleOperator and up run the nodes and queues and act on any job.
	ruleOperator rule = "operator"
	// ruleAdmin alone changes teams, quotas, users, tokens, join tokens, reservations and
	// configuration, and reads the audit trail.
	ruleAdmin rule = "admin"
)

// ruleRole is the least role a rule admits.
var ruleRole = map[rule]auth.Role{
	ruleViewer:   auth.RoleViewer,
	ruleMember:   auth.RoleMember,
	ruleOperator: auth.RoleOperator,
	ruleAdmin:    auth.RoleAdmin,
}

// forbidden is a 403 naming the caller's role and the rule that refused it.
func forbidden(id auth.Identity, r, format string, args ...any) *api.Error {
	role := string(id.Role)
	if role == "" {
		role = id.Kind
	}
	return &api.Error{Code: api.CodeForbidden, Role: role, Rule: r,
		Message: fmt.Sprintf(format, args...)}
}

// authorize checks the route's rule for id. Agents and people never share a route: a node
// certificate opens only agent routes, and a token or account never opens those.
func authorize(id auth.Identity, rt route, r *http.Request) *api.Error {
	switch rt.rule {
	case rulePublic:
		return nil
	case ruleAgent:
		node := r.PathValue("node")
		switch {
		case id.Kind == auth.KindLocal:
			return nil
		case id.Kind == auth.KindNode && id.Node == node:
			return nil
		case id.Kind == auth.KindNode:
			return forbidden(id, string(rt.rule), "the certificate of node %s cannot speak for node %s", id.Node, node)
		}
		return forbidden(id, string(rt.rule), "only a node's agent may call %s %s: agents authenticate with the certificate they get from `rota agent --join TOKEN` over TLS", r.Method, rt.path)
	}
	if id.Kind == auth.KindNode || id.Kind == auth.KindLocal {
		return forbidden(id, string(rt.rule), "an agent's credentials open only the agent routes, not %s %s", r.Method, rt.path)
	}
	if rt.rule == ruleAnyone {
		return nil
	}
	if !id.Role.AtLeast(ruleRole[rt.rule]) {
		return forbidden(id, string(rt.rule), "%s %s needs role %s or above; %s has role %s", r.Method, rt.path, ruleRole[rt.rule], id.User, id.Role)
	}
	return nil
}

// Object rules for one job. They are named so a refusal can say which one refused.
const (
	ruleOwnJobs  = "own-jobs"
	ruleTeamJobs = "team-jobs"
	ruleOwnLogs  = "own-logs"
)

// mayRead reports whether id may see the job: viewers and up see every job's summary; a
// member sees its own jobs and those of the teams that list it.
func (s *Server) mayRead(id auth.Identity, j *api.Job) *api.Error {
	if s.readFilter(id)(j) {
		return nil
	}
	teams := s.state.TeamsOf(id.User)
	return forbidden(id, ruleTeamJobs, "job %d belongs to team %s; role member reads only its own jobs and those of its teams (%s)",
		j.ID, j.Spec.Team, joinOr(teams, "none"))
}

// readsEveryJob reports whether id may read every job: every role but member may.
func readsEveryJob(id auth.Identity) bool { return id.Role != auth.RoleMember }

// readFilter is mayRead for filtering many jobs: a test that looks a member's teams up
// once, not per job, and says no without the reason mayRead would build (a listing
// turns many jobs away). Callers hold s.mu; the test itself reads nothing of the state.
func (s *Server) readFilter(id auth.Identity) func(*api.Job) bool {
	if readsEveryJob(id) {
		return func(*api.Job) bool { return true }
	}
	teams := s.state.TeamsOf(id.User)
	return func(j *api.Job) bool { return j.Spec.User == id.User || slices.Contains(teams, j.Spec.Team) }
}

// mayAct reports whether id may cancel, hold or release the job: operators and admins may
// act on any job, a member on its own.
func mayAct(id auth.Identity, j *api.Job) *api.Error {
	if id.Role.AtLeast(auth.RoleOperator) || j.Spec.User == id.User {
		return nil
	}
	return forbidden(id, ruleOwnJobs, "job %d belongs to %s; role %s acts only on its own jobs", j.ID, j.Spec.User, id.Role)
}

// mayReadLogs reports whether id may read the job's output: operators and admins read any,
// a member its own; viewers read none.
func mayReadLogs(id auth.Identity, j *api.Job) *api.Error {
	if id.Role.AtLeast(auth.RoleOperator) || (id.Role == auth.RoleMember && j.Spec.User == id.User) {
		return nil
	}
	return forbidden(id, ruleOwnLogs, "the output of job %d is readable by its owner %s, operators and admins; %s has role %s", j.ID, j.Spec.User, id.User, id.Role)
}

// maySeeEnv reports whether id sees the job's environment values: its owner and admins.
func maySeeEnv(id auth.Identity, j *api.Job) bool {
	return id.Role == auth.RoleAdmin || (j.Spec.User == id.User && id.Role.AtLeast(auth.RoleMember))
}

// redacted is what everyone else sees in place of an environment value.
const redacted = "<redacted>"

// redactEnv replaces the job's environment values unless id may see them.
func redactEnv(id auth.Identity, j *api.Job) {
	if len(j.Spec.Env) == 0 || maySeeEnv(id, j) {
		return
	}
	env := make(map[string]string, len(j.Spec.Env))
	for k := range j.Spec.Env {
		env[k] = redacted
	}
	j.Spec.Env = env
}

func joinOr(list []string, none string) string {
	if len(list) == 0 {
		return none
	}
	out := list[0]
	for _, s := range list[1:] {
		out += ", " + s
	}
	return out
}
