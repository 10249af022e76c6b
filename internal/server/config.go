package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

const maxTier = 1000

// validateQueue checks one queue definition. Every rule names the field and the bound.
func validateQueue(q *api.Queue) *api.Error {
	switch {
	case q.Name == "" || len(q.Name) > maxNameLen || !nameRE().MatchString(q.Name):
		return invalid("name", "queue name %q: use letters, digits and ._@+-", q.Name)
	case q.Tier < 0 || q.Tier > maxTier:
		return invalid("tier", "queue %s: tier must be between 0 and %d, got %d", q.Name, maxTier, q.Tier)
	case q.DefaultTimeLimit < 0 || q.DefaultTimeLimit > maxTimeLimit:
		return invalid("default_time_limit_s", "queue %s: must be between 0 and %d seconds", q.Name, int64(maxTimeLimit))
	case q.MaxTimeLimit < 0 || q.MaxTimeLimit > maxTimeLimit:
		return invalid("max_time_limit_s", "queue %s: must be between 0 (no limit) and %d seconds", q.Name, int64(maxTimeLimit))
	case q.MaxTimeLimit > 0 && q.DefaultTimeLimit > q.MaxTimeLimit:
		return invalid("default_time_limit_s", "queue %s: the default %s is above the maximum %s", q.Name, fmtSeconds(q.DefaultTimeLimit), fmtSeconds(q.MaxTimeLimit))
	case q.MaxTimeLimit > 0 && q.DefaultTimeLimit == 0:
		return invalid("default_time_limit_s", "queue %s: a queue with a maximum time limit needs a default one", q.Name)
	case q.Grace < 0 || q.Grace > maxGrace:
		return invalid("grace_s", "queue %s: must be between 0 and %d seconds", q.Name, int64(maxGrace))
	case q.MaxGrace < 0 || q.MaxGrace > maxGrace:
		return invalid("max_grace_s", "queue %s: must be between 0 and %d seconds", q.Name, int64(maxGrace))
	case q.MaxGrace > 0 && q.MaxGrace < q.Grace:
		return invalid("max_grace_s", "queue %s: the maximum grace %ds is below the default %ds", q.Name, q.MaxGrace, q.Grace)
	case q.UserGPULimit < 0 || q.UserGPULimit > maxGPUs:
		return invalid("user_gpu_limit", "queue %s: must be between 0 (no limit) and %d", q.Name, maxGPUs)
	case q.NeverPreempt && q.Preemptible:
		return invalid("never_preempt", "queue %s: cannot be both preemptible and never preempted", q.Name)
	case q.RestartPolicy != "" && !validRestartPolicy(q.RestartPolicy):
		return invalid("restart_policy", "queue %s: %q is not a restart policy; use never, on-failure or always", q.Name, q.RestartPolicy)
	}
	if e := validateCheckpointRoot("checkpoint_root", q.CheckpointRoot); e != nil {
		e.Message = "queue " + q.Name + ": " + e.Message
		return e
	}
	if e := validateQueueIdle(*q); e != nil {
		return e
	}
	for field, names := range map[string][]string{"pools": q.Pools, "users": q.Users, "teams": q.Teams} {
		for _, n := range names {
			if !nameRE().MatchString(n) {
				return invalid(field, "queue %s: %q is not a valid name", q.Name, n)
			}
		}
	}
	return nil
}

// validateTeam checks one team definition and fills in defaults.
func validateTeam(t *api.Team) *api.Error {
	switch {
	case t.Name == "" || len(t.Name) > maxNameLen || !nameRE().MatchString(t.Name):
		return invalid("name", "team name %q: use letters, digits and ._@+-", t.Name)
	case t.Weight < 0 || t.Weight > 1e6:
		return invalid("weight", "team %s: weight must be between 0 and 1000000, got %g", t.Name, t.Weight)
	}
	if t.Weight == 0 {
		t.Weight = 1
	}
	for model, q := range t.Quotas {
		switch {
		case model == "":
			return invalid("quotas", "team %s: a quota needs a GPU model, or * for any", t.Name)
		case q.Guaranteed < 0 || q.Guaranteed > maxGPUs || q.Limit < 0 || q.Limit > maxGPUs:
			return invalid("quotas", "team %s, model %s: guaranteed and limit must be between 0 and %d GPUs", t.Name, model, maxGPUs)
		case q.Limit == 0:
			q.Limit = q.Guaranteed
		case q.Limit < q.Guaranteed:
			return invalid("quotas", "team %s, model %s: limit %d is below guaranteed %d", t.Name, model, q.Limit, q.Guaranteed)
		}
		t.Quotas[model] = q
	}
	for _, m := range t.Members {
		if !nameRE().MatchString(m) {
			return invalid("members", "team %s: %q is not a valid user name", t.Name, m)
		}
	}
	if e := validateTeamParts(t); e != nil {
		return e
	}
	t.UsageGPUHours, t.GPUsInUse = 0, nil
	return nil
}

// validateCheckpointRoot accepts an absolute, clean path without control characters, or
// nothing.
func validateCheckpointRoot(field, p string) *api.Error {
	if p == "" {
		return nil
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsFunc(p, isControl) || len(p) > 1024 {
		return invalid(field, "%q must be an absolute, clean path (like /mnt/checkpoints) mounted at the same place on every node", truncateName(p))
	}
	return nil
}

// minBodyLimit is the least limits.max_body_bytes may be.
const minBodyLimit = 4 << 10

// validateLimits checks limits an admin sets; zero fields keep their defaults.
func validateLimits(l api.Limits) *api.Error {
	switch {
	case l.MaxBodyBytes != 0 && (l.MaxBodyBytes < minBodyLimit || l.MaxBodyBytes > 1<<30):
		// Below a few KiB even the change that raises the limit again would be refused.
		return invalid("limits.max_body_bytes", "must be 0 (the default, 1 MiB) or from %d bytes (4 KiB; a smaller limit would refuse even the change that raises it again) to 1 GiB", minBodyLimit)
	case l.MaxCommandBytes < 0 || l.MaxCommandBytes > 16<<20:
		return invalid("limits.max_command_bytes", "must be between 0 (default) and 16 MiB")
	case l.MaxEnvBytes < 0 || l.MaxEnvBytes > 16<<20:
		return invalid("limits.max_env_bytes", "must be between 0 (default) and 16 MiB")
	case l.MaxNameLength < 0 || l.MaxNameLength > 253:
		return invalid("limits.max_name_length", "must be between 0 (default) and 253")
	case l.MaxPendingPerUser < 0 || l.MaxPendingPerUser > 10_000_000:
		return invalid("limits.max_pending_per_user", "must be between 0 (default) and 10000000")
	case !(l.SubmitsPerSecond >= 0 && l.SubmitsPerSecond <= 1e6): // NaN too, which YAML can write
		return invalid("limits.submits_per_second", "must be between 0 (default) and 1000000")
	case l.SubmitBurst < 0 || l.SubmitBurst > 1e7:
		return invalid("limits.submit_burst", "must be between 0 (default) and 10000000")
	case !(l.WritesPerSecond >= 0 && l.WritesPerSecond <= 1e6):
		return invalid("limits.writes_per_second", "must be between 0 (default) and 1000000")
	case l.WriteBurst < 0 || l.WriteBurst > 1e7:
		return invalid("limits.write_burst", "must be between 0 (default) and 10000000")
	case !(l.ReadSecondsPerSecond >= 0 && l.ReadSecondsPerSecond <= 1000):
		return invalid("limits.read_seconds_per_second", "must be between 0 (default) and 1000")
	case !(l.ReadBurstSeconds >= 0 && l.ReadBurstSeconds <= 86400):
		return invalid("limits.read_burst_seconds", "must be between 0 (default) and 86400")
	case l.MaxReadsInFlight < 0 || l.MaxReadsInFlight > 100_000:
		return invalid("limits.max_reads_in_flight", "must be between 0 (default) and 100000")
	}
	return nil
}

// Limits on the notification settings.
const (
	maxURLPrefixes  = 64
	maxNotifySecret = 1024
)

// validateNotifications checks the cluster's webhook settings. A prefix must end its host
// with a path ("https://hooks.example.com/", not "https://hooks.example.com"), or it would
// also allow https://hooks.example.com.attacker.net.
func validateNotifications(n api.Notifications) *api.Error {
	if len(n.Secret) > maxNotifySecret {
		return invalid("notifications.secret", "is %d bytes long; at most %d are allowed", len(n.Secret), maxNotifySecret)
	}
	if len(n.URLPrefixes) > maxURLPrefixes {
		return invalid("notifications.url_prefixes", "has %d prefixes; at most %d are allowed", len(n.URLPrefixes), maxURLPrefixes)
	}
	for i, p := range n.URLPrefixes {
		field := fmt.Sprintf("notifications.url_prefixes[%d]", i)
		if e := validateWebhookURL(field, p); e != nil {
			return e
		}
		if u, _ := url.Parse(p); !strings.HasPrefix(u.Path, "/") {
			return invalid(field, "%q must end its host with a path, at least /, like https://hooks.example.com/ (else it also allows hosts that merely begin the same)", truncateName(p))
		}
	}
	return nil
}

// redactSecret hides the webhook secret from the audit trail, saying only whether one is set.
func redactSecret(n api.Notifications) api.Notifications {
	if n.Secret != "" {
		n.Secret = "(set)"
	}
	return n
}

// applyConfig validates a YAML (or JSON) configuration whole and commits it in one batch, or
// changes nothing and names the line at fault. Every change it makes is an audit event
// carrying who (from by: actor, role, source) and the value before and after. Callers hold
// s.mu.
func (s *Server) applyConfig(ctx context.Context, data []byte, by api.Event) (api.Config, *api.Error) {
	cfg, e := decodeConfig(data)
	if e != nil {
		return cfg, e
	}
	var doc yaml.Node
	yaml.Unmarshal(data, &doc)
	lines := itemLines(&doc)
	seen := map[string]bool{}
	b := &store.Batch{}
	now := s.cfg.Clock.Now()
	event := func(kind, msg string, before, after any) {
		ev := by
		ev.Time, ev.Kind, ev.Message = now, kind, msg
		b.Events = append(b.Events, withChange(ev, before, after))
	}
	for i := range cfg.Queues {
		q := &cfg.Queues[i]
		if e := validateQueue(q); e != nil {
			return cfg, atLine(e, lines["queues"], i)
		}
		if seen["q/"+q.Name] {
			return cfg, atLine(invalid("name", "queue %s is defined twice", q.Name), lines["queues"], i)
		}
		seen["q/"+q.Name] = true
		b.Queues = append(b.Queues, *q)
		var before any
		if old, ok := s.state.Queue(q.Name); ok {
			before = old
		}
		event(api.EventQueue, "set queue "+q.Name, before, *q)
	}
	notifications := notifySettings(s.state)
	if cfg.Notifications != nil {
		if e := validateNotifications(*cfg.Notifications); e != nil {
			return cfg, e
		}
		notifications = *cfg.Notifications
	}
	for i := range cfg.Teams {
		t := &cfg.Teams[i]
		if e := validateTeam(t); e != nil {
			return cfg, atLine(e, lines["teams"], i)
		}
		if e := validateNotify("notify", t.Notify, notifications.URLPrefixes); e != nil {
			return cfg, atLine(e, lines["teams"], i)
		}
		if seen["t/"+t.Name] {
			return cfg, atLine(invalid("name", "team %s is defined twice", t.Name), lines["teams"], i)
		}
		seen["t/"+t.Name] = true
		b.Teams = append(b.Teams, *t)
		kind := api.EventTeam
		var before any
		if old, ok := s.state.Team(t.Name); ok {
			before = old
			if !reflect.DeepEqual(old.Quotas, t.Quotas) {
				kind = api.EventQuota
			}
		}
		event(kind, "set team "+t.Name, before, *t)
	}
	if cfg.Execution != nil {
		if e := validateCheckpointRoot("execution.checkpoint_root", cfg.Execution.CheckpointRoot); e != nil {
			return cfg, e
		}
		data, _ := json.Marshal(cfg.Execution)
		b.Settings = append(b.Settings, store.Setting{Name: cluster.SettingExecution, Data: data})
		event(api.EventConfig, "set execution settings", s.state.Execution(), *cfg.Execution)
	}
	if cfg.Pools != nil {
		names := map[string]bool{}
		for i, p := range cfg.Pools {
			switch {
			case p.Name == "" || len(p.Name) > maxNameLen || !nameRE().MatchString(p.Name):
				return cfg, atLine(invalid("pools.name", "pool name %q: use letters, digits and ._@+- (the value of the nodes' pool label)", truncateName(p.Name)), lines["pools"], i)
			case names[p.Name]:
				return cfg, atLine(invalid("pools.name", "pool %s is defined twice", p.Name), lines["pools"], i)
			}
			names[p.Name] = true
			for _, v := range []struct {
				field string
				text  *string
			}{{"pools.driver", &cfg.Pools[i].Driver}, {"pools.cuda", &cfg.Pools[i].CUDA}} {
				norm, e := versionRange(v.field, *v.text)
				if e != nil {
					e.Message = "pool " + p.Name + ": " + e.Message
					return cfg, atLine(e, lines["pools"], i)
				}
				*v.text = norm
			}
		}
		data, _ := json.Marshal(cfg.Pools)
		b.Settings = append(b.Settings, store.Setting{Name: cluster.SettingPools, Data: data})
		event(api.EventConfig, "set pools", s.state.PoolList(), cfg.Pools)
	}
	if cfg.Limits != nil {
		if e := validateLimits(*cfg.Limits); e != nil {
			return cfg, e
		}
		data, _ := json.Marshal(cfg.Limits)
		b.Settings = append(b.Settings, store.Setting{Name: cluster.SettingLimits, Data: data})
		event(api.EventConfig, "set limits", s.state.Limits(), cfg.Limits.OrDefaults())
	}
	if cfg.Notifications != nil {
		data, _ := json.Marshal(cfg.Notifications)
		b.Settings = append(b.Settings, store.Setting{Name: settingNotifications, Data: data})
		old := notifySettings(s.state)
		event(api.EventConfig, "set notification settings", redactSecret(old), redactSecret(*cfg.Notifications))
	}
	if err := s.commit(ctx, b); err != nil {
		code := api.CodeInternal
		if errors.Is(err, errStale) {
			code = api.CodeUnavailable
		}
		return cfg, &api.Error{Code: code, Message: "the configuration could not be stored: " + err.Error()}
	}
	s.wake()
	return cfg, nil
}

// configFile is a configuration as a file or PUT /config carries it. A team may also hold
// what GET /api/v1/teams answers with (its usage and GPUs in use), so that a configuration
// built from the API's answers goes back as it is: those fields are read and ignored.
type configFile struct {
	Queues        []api.Queue        `yaml:"queues"`
	Teams         []configTeam       `yaml:"teams"`
	Pools         []api.Pool         `yaml:"pools"`
	Execution     *api.Execution     `yaml:"execution"`
	Limits        *api.Limits        `yaml:"limits"`
	Notifications *api.Notifications `yaml:"notifications"`
}

type configTeam struct {
	api.Team      `yaml:",inline"`
	UsageGPUHours float64        `yaml:"usage_gpu_hours"`
	GPUsInUse     map[string]int `yaml:"gpus_in_use"`
}

// unquotedRangeRE finds a pool's version range left unquoted with a leading >, which
// YAML reads as the start of a folded block and refuses with a message about line breaks.
var unquotedRangeRE = regexp.MustCompile(`(?m)^[\s-]*(driver|cuda):\s*>`)

// unquotedRangeHint says how to write such a range when the configuration has one.
func unquotedRangeHint(data []byte) string {
	if m := unquotedRangeRE.FindSubmatch(data); m != nil {
		return fmt.Sprintf("; quote version ranges that start with >, e.g. %s: \">=550\"", m[1])
	}
	return ""
}

// decodeConfig reads exactly one YAML (or JSON) document holding a configuration, with no
// unknown fields: an empty body, or a second document that would be silently dropped, is
// refused.
func decodeConfig(data []byte) (api.Config, *api.Error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err == nil && len(doc.Content) > 0 {
		if root := doc.Content[0]; root.Kind != yaml.MappingNode {
			return api.Config{}, invalid("config", "line %d: the configuration must be a mapping of queues, teams, execution, limits and notifications", root.Line)
		}
		if e := configNulls(doc.Content[0], ""); e != nil {
			return api.Config{}, e
		}
	}
	var file configFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		if errors.Is(err, io.EOF) {
			return api.Config{}, invalid("config", "the configuration is empty: give queues, teams, pools, execution, limits or notifications")
		}
		return api.Config{}, invalid("config", "%s%s", strings.TrimPrefix(err.Error(), "yaml: "), unquotedRangeHint(data))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return api.Config{}, invalid("config", "the file holds more than one YAML document; put queues, teams, execution and limits in one")
	}
	cfg := api.Config{Queues: file.Queues, Pools: file.Pools, Execution: file.Execution, Limits: file.Limits, Notifications: file.Notifications}
	for _, t := range file.Teams {
		cfg.Teams = append(cfg.Teams, t.Team)
	}
	return cfg, nil
}

// configNulls refuses a null anywhere in a configuration (`limits: {max_env_bytes: null}`,
// `teams:` with nothing after it): it would read as the zero value, which is not what was
// written. path names the value, like limits.max_env_bytes.
func configNulls(n *yaml.Node, path string) *api.Error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, v := n.Content[i], n.Content[i+1]
			p := joinPath(path, truncateName(key.Value))
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				return invalid("config", "line %d: %s is null: leave it out or give a value", v.Line, p)
			}
			if e := configNulls(v, p); e != nil {
				return e
			}
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				return invalid("config", "line %d: %s is null: leave it out or give a value", v.Line, p)
			}
			if e := configNulls(v, p); e != nil {
				return e
			}
		}
	}
	return nil
}

// itemLines maps the top-level keys "queues" and "teams" to the line of each of their items.
func itemLines(doc *yaml.Node) map[string][]int {
	out := map[string][]int{}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return out
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		for _, item := range m.Content[i+1].Content {
			out[m.Content[i].Value] = append(out[m.Content[i].Value], item.Line)
		}
	}
	return out
}

func atLine(e *api.Error, lines []int, i int) *api.Error {
	if i < len(lines) {
		e.Message = fmt.Sprintf("line %d: %s", lines[i], e.Message)
	}
	return e
}
