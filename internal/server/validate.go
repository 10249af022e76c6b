package server

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/sched"
)

// Limits on a job request. They catch typos (a million GPUs, a ten-year limit) before the
// request reaches the store; none of them is close to what a real job needs.
const (
	maxGPUs      = 4096
	maxNodes     = 512
	maxCPUs      = 8192
	maxMemoryMB  = 64 << 20 // 64 TiB
	maxTimeLimit = 365 * day
	maxGrace     = hour
	maxRetries   = 100
	maxArgs      = 4096
	maxNameLen   = 128
	maxEnv       = 512
	defaultCPUs  = 1
	// defaultRetries is the retries of a job whose restart policy retries and that names
	// no number.
	defaultRetries = 3
)

var (
	nameRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]*$`) })
	envKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	signals  = []string{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGKILL"}
)

// validateSpec checks a submitted request, fills in defaults, and refuses what can never run.
// It returns an error naming the field at fault and what is allowed. The user and team are
// the caller's, set and checked before (see submitter).
func validateSpec(spec *api.JobSpec, st *cluster.State) *api.Error {
	if len(spec.Command) == 0 || strings.TrimSpace(spec.Command[0]) == "" {
		return invalid("command", "is empty: give the program to run and its arguments")
	}
	if len(spec.Command) > maxArgs {
		return invalid("command", "has %d arguments; at most %d are allowed", len(spec.Command), maxArgs)
	}
	if spec.Name != "" && !nameRE().MatchString(spec.Name) {
		return invalid("name", "must be letters, digits and ._@+- starting with a letter or digit")
	}
	if spec.Name == "" {
		spec.Name = defaultName(spec.Command[0])
	}
	if _, ok := st.Team(spec.Team); !ok && spec.Team != "default" {
		var names []string
		for _, t := range st.Teams() {
			names = append(names, t.Name)
		}
		return invalid("team", "unknown team %q; teams are: default %s", spec.Team, strings.Join(names, " "))
	}
	if spec.Project != "" {
		t, _ := st.Team(spec.Team)
		if _, ok := project(t, spec.Project); !ok {
			return invalid("project", "team %s has no project %q; its projects: %s", spec.Team, truncateName(spec.Project), projectNames(t))
		}
	}
	if spec.Queue == "" {
		spec.Queue = DefaultQueue
	}
	q, ok := st.Queue(spec.Queue)
	if !ok {
		var names []string
		for _, q := range st.Queues() {
			names = append(names, q.Name)
		}
		return invalid("queue", "unknown queue %q; queues are: %s", spec.Queue, strings.Join(names, ", "))
	}
	if (len(q.Users) > 0 || len(q.Teams) > 0) && !slices.Contains(q.Users, spec.User) && !slices.Contains(q.Teams, spec.Team) &&
		!st.QueueGrant(spec.User, q.Name) {
		return invalid("queue", "user %s of team %s may not submit to queue %s; ask for it with `rota request queue %s`", spec.User, spec.Team, q.Name, q.Name)
	}
	if spec.Nice < -10000 || spec.Nice > 10000 {
		return invalid("nice", "must be between -10000 and 10000, got %d", spec.Nice)
	}
	if err := validateDeps(spec, st); err != nil {
		return err
	}
	if len(spec.Env) > maxEnv {
		return invalid("env", "has %d variables; at most %d are allowed", len(spec.Env), maxEnv)
	}
	for k := range spec.Env {
		if !envKeyRE().MatchString(k) {
			return invalid("env", "%q is not a valid variable name", k)
		}
		if strings.HasPrefix(k, "ROTA_") || k == api.EnvCUDAVisibleDevices {
			return invalid("env", "%s is set by rota and cannot be given", k)
		}
	}
	if err := validateResources(spec); err != nil {
		return err
	}
	if err := validateShare(spec, q, st); err != nil {
		return err
	}
	if err := validateModels(spec); err != nil {
		return err
	}
	if err := validateRestart(spec, q); err != nil {
		return err
	}
	if err := validateTime(spec, q); err != nil {
		return err
	}
	if err := validateImage(spec.Image); err != nil {
		return err
	}
	if err := validateTTY(spec); err != nil {
		return err
	}
	var e *api.Error
	if spec.CUDA, e = versionRange("cuda", spec.CUDA); e != nil {
		return e
	}
	if spec.Driver, e = versionRange("driver", spec.Driver); e != nil {
		return e
	}
	if err := allowedImage(spec.Image, q); err != nil {
		return err
	}
	if err := validateNotify("notify", spec.Notify, notifySettings(st).URLPrefixes); err != nil {
		return err
	}
	if err := checkFits(spec, st); err != nil {
		return err
	}
	return checkSlice(spec, q, st)
}

// validateShare checks a request for a share of one GPU: a share below one GPU in steps
// of 0.001, or a memory slice, not both, on one GPU of one node, in a queue that may use a
// pool that allows sharing. It sets gpus to 1.
func validateShare(spec *api.JobSpec, q api.Queue, st *cluster.State) *api.Error {
	share := spec.GPUShare
	switch {
	case share == 0 && spec.GPUMemoryMB == 0:
		return nil
	case share < 0 || share >= 1 || math.IsNaN(share):
		return invalid("gpu_share", "must be above 0 and below 1 (0.5: half a GPU), got %g; for whole GPUs use gpus", share)
	case share > 0 && math.Abs(share*1000-math.Round(share*1000)) > 1e-6:
		return invalid("gpu_share", "is counted in thousandths of a GPU; %g has more digits", share)
	case spec.GPUMemoryMB < 0 || spec.GPUMemoryMB > maxMemoryMB:
		return invalid("gpu_memory_mb", "must be between 0 and %d, got %d", int64(maxMemoryMB), spec.GPUMemoryMB)
	case share > 0 && spec.GPUMemoryMB > 0:
		return invalid("gpu_memory_mb", "give a share of a GPU (gpu_share) or a slice of its memory (gpu_memory_mb), not both")
	case spec.Nodes > 1 || spec.GPUsPerNode > 0:
		return invalid("nodes", "a share of a GPU runs on one GPU of one node; drop nodes and gpus_per_node")
	case spec.GPUs > 1:
		return invalid("gpus", "a share of a GPU is one GPU; got gpus %d with it", spec.GPUs)
	}
	spec.GPUs = 1
	pools := st.Pools()
	var sharing []string
	for _, p := range pools {
		if p.Sharing && (len(q.Pools) == 0 && !p.Exclusive || slices.Contains(q.Pools, p.Name)) {
			sharing = append(sharing, p.Name)
		}
	}
	if len(sharing) > 0 {
		return nil
	}
	field := "gpu_share"
	if share == 0 {
		field = "gpu_memory_mb"
	}
	if len(q.Pools) > 0 {
		return invalid(field, "queue %s uses pools %s, and none allows GPU sharing; an admin allows it with pools: [{name: %s, sharing: true}] in rota admin config",
			q.Name, strings.Join(q.Pools, ", "), q.Pools[0])
	}
	return invalid(field, "no pool allows GPU sharing; an admin allows it with pools: [{name: NAME, sharing: true}] in rota admin config, for the nodes labelled pool=NAME")
}

// checkSlice refuses a memory slice larger than every GPU the job could share, where such
// GPUs are known.
func checkSlice(spec *api.JobSpec, q api.Queue, st *cluster.State) *api.Error {
	if spec.GPUMemoryMB == 0 {
		return nil
	}
	pools := st.Pools()
	largest, seen := int64(0), false
	for _, n := range st.Nodes() {
		p := pools[n.Labels["pool"]]
		if !p.Sharing || (len(q.Pools) == 0 && p.Exclusive) || (len(q.Pools) > 0 && !slices.Contains(q.Pools, p.Name)) {
			continue
		}
		for _, g := range n.GPUs {
			if takesModel(spec.GPUModel, g.Model) {
				seen = true
				largest = max(largest, g.MemoryMB)
			}
		}
	}
	if seen && spec.GPUMemoryMB > largest {
		return invalid("gpu_memory_mb", "no GPU that may be shared has %d MB; the largest has %d MB", spec.GPUMemoryMB, largest)
	}
	return nil
}

// Limits on webhooks (docs/notifications.md).
const (
	maxNotify       = 8
	maxNotifyURLLen = 2048
)

// validateNotify checks the webhooks of a job, a user or a team: at most maxNotify, each an
// http or https URL with a host and without credentials (a URL is logged and shown; a
// password in it would leak), under one of the cluster's prefixes when it has some, with
// events from api.NotifyEvents. field names the list in errors, e.g. "notify[0].url".
func validateNotify(field string, list []api.Notify, prefixes []string) *api.Error {
	if len(list) > maxNotify {
		return invalid(field, "has %d webhooks; at most %d are allowed", len(list), maxNotify)
	}
	for i, n := range list {
		at := fmt.Sprintf("%s[%d]", field, i)
		if e := validateWebhookURL(at+".url", n.URL); e != nil {
			return e
		}
		if !allowedURL(n.URL, prefixes) {
			return invalid(at+".url", "%q is not under a prefix this cluster allows webhooks to: %s", truncateName(n.URL), strings.Join(prefixes, " "))
		}
		for j, other := range list[:i] {
			if other.URL == n.URL {
				return invalid(at+".url", "repeats %s[%d]'s URL; give each URL once, with all its events", field, j)
			}
		}
		for j, e := range n.Events {
			if !slices.Contains(api.NotifyEvents(), e) {
				return invalid(fmt.Sprintf("%s.events[%d]", at, j), "%q is not an event; use %s", truncateName(e), strings.Join(api.NotifyEvents(), ", "))
			}
			if slices.Contains(n.Events[:j], e) {
				return invalid(fmt.Sprintf("%s.events[%d]", at, j), "%s is listed twice", e)
			}
		}
	}
	return nil
}

// validateWebhookURL checks one URL a webhook goes to, or a prefix such URLs must start with.
func validateWebhookURL(field, raw string) *api.Error {
	const allowed = "give an http or https URL with a host, like https://hooks.example.com/rota"
	if len(raw) > maxNotifyURLLen {
		return invalid(field, "is %d bytes long; at most %d are allowed", len(raw), maxNotifyURLLen)
	}
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return invalid(field, "is empty; %s", allowed)
	case err != nil:
		return invalid(field, "%q is not a URL; %s", truncateName(raw), allowed)
	case u.Scheme != "http" && u.Scheme != "https":
		return invalid(field, "%q: the scheme must be http or https; %s", truncateName(raw), allowed)
	case u.Hostname() == "":
		return invalid(field, "%q has no host; %s", truncateName(raw), allowed)
	case u.User != nil:
		return invalid(field, "%q holds credentials (user:password@), which would show in logs and listings; "+
			"let the receiver check the Rota-Signature header instead", truncateName(u.Redacted()))
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return invalid(field, "%q has a fragment (#...), which is never sent; leave it out", truncateName(raw))
	}
	return nil
}

// Limits on images: a reference longer than this is no registry's, and an allow-list
// longer than this is a list of images, not of registries.
const (
	maxImageLen       = 512
	maxImageNameLen   = 255 // the distribution spec's bound on a repository name
	maxQueueImages    = 64
	maxImagePrefixLen = 256
)

// The parts of an OCI image reference, after the distribution project's grammar
// (github.com/distribution/reference): [host[:port]/]path[:tag][@sha256:hex].
var (
	imageHostRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?$`)
	})
	imageComponentRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`) })
	imageTagRE       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`) })
	imageDigestRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`) })
)

// imageForms is what every refusal of an image says is allowed.
const imageForms = "give an OCI reference [registry[:port]/]name[:tag][@sha256:<64 hex digits>] " +
	"with a lowercase name, or the absolute path of an apptainer .sif file"

// validateImage checks a job's container image: empty (no container), an OCI image
// reference, or the absolute path of an apptainer image file. It checks the form only;
// whether the image exists is known when the node pulls it.
func validateImage(image string) *api.Error {
	bad := func(format string, args ...any) *api.Error {
		return invalid("image", "%q: "+format+"; "+imageForms, append([]any{truncateName(image)}, args...)...)
	}
	switch {
	case image == "":
		return nil
	case len(image) > maxImageLen:
		return invalid("image", "is %d bytes; at most %d are allowed", len(image), maxImageLen)
	case strings.ContainsFunc(image, badImageRune):
		return bad("holds a space or a control character")
	case strings.HasPrefix(image, "/"):
		if path.Clean(image) != image || !strings.HasSuffix(image, ".sif") || path.Base(image) == ".sif" {
			return bad("a path must be absolute, clean (no .., // or trailing /) and name a .sif file")
		}
		return nil
	}
	ref, digest, hasDigest := strings.Cut(image, "@")
	if hasDigest && !imageDigestRE().MatchString(digest) {
		return bad("the digest must be sha256: followed by 64 lowercase hex digits")
	}
	name, tag := ref, ""
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		name, tag = ref[:i], ref[i+1:]
		if !imageTagRE().MatchString(tag) {
			return bad("the tag %q must be 1 to 128 letters, digits and _.- not starting with . or -", truncateName(tag))
		}
	}
	if len(name) > maxImageNameLen {
		return bad("the name is %d bytes; at most %d are allowed", len(name), maxImageNameLen)
	}
	parts := strings.Split(name, "/")
	// The first part is a registry when it looks like a host: it has a dot or a port, or
	// is localhost (as docker and podman read it).
	if first := parts[0]; len(parts) > 1 && (strings.ContainsAny(first, ".:") || first == "localhost") {
		if !imageHostRE().MatchString(first) || !validPort(first) {
			return bad("the registry %q must be a host name with an optional :port", truncateName(first))
		}
		parts = parts[1:]
	}
	for _, c := range parts {
		if !imageComponentRE().MatchString(c) {
			return bad("the name part %q must be lowercase letters and digits, separated by ., _, __ or -", truncateName(c))
		}
	}
	return nil
}

// validPort reports whether a registry host's port, if it has one, is 1 to 65535.
func validPort(host string) bool {
	_, port, ok := strings.Cut(host, ":")
	if !ok {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// badImageRune is what no image reference or allow-list prefix may hold: spaces, which a
// runtime's command line would split on, and control characters, which would break the
// tables the image is shown in.
func badImageRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar
}

// allowedImage refuses an image that starts with none of the queue's allowed prefixes.
// The match is on the reference as written: a queue that allows
// "registry.example.com/ml/" does not allow "ml/x" on the grounds that a node might
// resolve it there, since which registry a short name resolves to is each node's setting.
func allowedImage(image string, q api.Queue) *api.Error {
	if image == "" || len(q.Images) == 0 {
		return nil
	}
	for _, p := range q.Images {
		if strings.HasPrefix(image, p) {
			return nil
		}
	}
	return invalid("image", "%q is not allowed in queue %s; its images must start with one of: %s",
		truncateName(image), q.Name, strings.Join(q.Images, ", "))
}

// Bounds of a queue's idle policy.
const maxIdleAfter = 30 * day

// validateQueueIdle checks a queue's idle policy and image allow-list. An empty action
// means "warn" when IdleAfter is set; IdleAfter 0 switches the policy off, whatever the
// action says.
func validateQueueIdle(q api.Queue) *api.Error {
	switch {
	case q.IdleAfter < 0 || q.IdleAfter > maxIdleAfter:
		return invalid("idle_after_s", "queue %s: must be between 0 (off) and %d seconds (30 days), got %d", q.Name, int64(maxIdleAfter), q.IdleAfter)
	case q.IdleAction != "" && q.IdleAction != api.IdleWarn && q.IdleAction != api.IdleStop:
		return invalid("idle_action", "queue %s: %q is not an idle action; use warn or stop", q.Name, truncateName(q.IdleAction))
	case !(q.IdleThresholdPct >= 0 && q.IdleThresholdPct <= 100): // NaN too
		return invalid("idle_threshold_pct", "queue %s: must be between 0 and 100 percent, got %g", q.Name, q.IdleThresholdPct)
	case len(q.Images) > maxQueueImages:
		return invalid("images", "queue %s: has %d prefixes; at most %d are allowed", q.Name, len(q.Images), maxQueueImages)
	}
	for _, p := range q.Images {
		switch {
		case p == "":
			return invalid("images", "queue %s: an empty prefix would allow every image; leave the list empty for that", q.Name)
		case len(p) > maxImagePrefixLen:
			return invalid("images", "queue %s: a prefix is %d bytes; at most %d are allowed", q.Name, len(p), maxImagePrefixLen)
		case strings.ContainsFunc(p, badImageRune):
			return invalid("images", "queue %s: the prefix %q holds a space or a control character", q.Name, truncateName(p))
		}
	}
	return nil
}

func validRestartPolicy(p string) bool {
	return p == api.RestartNever || p == api.RestartOnFailure || p == api.RestartAlways
}

// validateRestart fills in the restart policy and retries: the job's own, else the queue's
// policy; "on-failure" when only retries are given; retries default to 0 under "never"
// and to defaultRetries otherwise.
func validateRestart(spec *api.JobSpec, q api.Queue) *api.Error {
	if spec.RestartPolicy != "" && !validRestartPolicy(spec.RestartPolicy) {
		return invalid("restart_policy", "%q is not a restart policy; use never, on-failure or always", truncateName(spec.RestartPolicy))
	}
	if spec.Retries != nil && (*spec.Retries < 0 || *spec.Retries > maxRetries) {
		return invalid("retries", "must be between 0 and %d, got %d", maxRetries, *spec.Retries)
	}
	switch {
	case spec.RestartPolicy != "":
	case q.RestartPolicy == api.RestartAlways:
		// A service queue's jobs restart whatever retries they ask for.
		spec.RestartPolicy = api.RestartAlways
	case spec.Retries != nil && *spec.Retries > 0:
		spec.RestartPolicy = api.RestartOnFailure
	case q.RestartPolicy != "":
		spec.RestartPolicy = q.RestartPolicy
	default:
		spec.RestartPolicy = api.RestartNever
	}
	if spec.Retries == nil {
		n := defaultRetries
		if spec.RestartPolicy == api.RestartNever {
			n = 0
		}
		spec.Retries = &n
	}
	return nil
}

func defaultName(prog string) string {
	base := prog[strings.LastIndex(prog, "/")+1:]
	var b strings.Builder
	for _, r := range base {
		if r < 128 && (r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		}
	}
	name := strings.TrimLeft(b.String(), "._-")
	if name == "" {
		return "job"
	}
	if len(name) > maxNameLen {
		name = name[:maxNameLen]
	}
	return name
}

func validateResources(spec *api.JobSpec) *api.Error {
	switch {
	case spec.GPUs < 0 || spec.GPUs > maxGPUs:
		return invalid("gpus", "must be between 0 and %d, got %d", maxGPUs, spec.GPUs)
	case spec.Nodes < 0 || spec.Nodes > maxNodes:
		return invalid("nodes", "must be between 0 and %d, got %d", maxNodes, spec.Nodes)
	case spec.GPUsPerNode < 0 || spec.GPUsPerNode > 64:
		return invalid("gpus_per_node", "must be between 0 and 64, got %d", spec.GPUsPerNode)
	case spec.CPUs < 0 || spec.CPUs > maxCPUs:
		return invalid("cpus", "must be between 0 and %d, got %d", maxCPUs, spec.CPUs)
	case spec.MemoryMB < 0 || spec.MemoryMB > maxMemoryMB:
		return invalid("memory_mb", "must be between 0 and %d (64 TiB), got %d", int64(maxMemoryMB), spec.MemoryMB)
	}
	if spec.Nodes > 1 || spec.GPUsPerNode > 0 {
		if spec.Nodes == 0 {
			spec.Nodes = 1
		}
		if spec.GPUsPerNode == 0 {
			return invalid("gpus_per_node", "is required when nodes is %d", spec.Nodes)
		}
		if spec.GPUs != 0 && spec.GPUs != spec.Nodes*spec.GPUsPerNode {
			return invalid("gpus", "is %d but nodes × gpus_per_node is %d; give one or make them agree", spec.GPUs, spec.Nodes*spec.GPUsPerNode)
		}
		spec.GPUs = spec.Nodes * spec.GPUsPerNode
	}
	if spec.CPUs == 0 {
		spec.CPUs = defaultCPUs
	}
	return nil
}

func validateTime(spec *api.JobSpec, q api.Queue) *api.Error {
	switch {
	case spec.TimeLimit < 0 || spec.TimeLimit > maxTimeLimit:
		return invalid("time_limit_s", "must be between 0 (the queue's default) and %d seconds (365 days), got %d", int64(maxTimeLimit), spec.TimeLimit)
	case q.MaxTimeLimit > 0 && spec.TimeLimit > q.MaxTimeLimit:
		return invalid("time_limit_s", "%s is above queue %s's maximum of %s", fmtSeconds(spec.TimeLimit), q.Name, fmtSeconds(q.MaxTimeLimit))
	case spec.Grace < 0 || spec.Grace > max(q.Grace, q.MaxGrace):
		return invalid("grace_s", "queue %s allows a grace of 0 to %d seconds, got %d", q.Name, max(q.Grace, q.MaxGrace), spec.Grace)
	}
	if spec.TimeLimit == 0 {
		spec.TimeLimit = q.DefaultTimeLimit
	}
	if spec.Grace == 0 {
		spec.Grace = q.Grace
	}
	if spec.Signal == "" {
		spec.Signal = "SIGTERM"
	}
	sig := strings.ToUpper(spec.Signal)
	if !strings.HasPrefix(sig, "SIG") {
		sig = "SIG" + sig
	}
	if !slices.Contains(signals, sig) {
		return invalid("signal", "%q is not allowed; use one of %s", spec.Signal, strings.Join(signals, ", "))
	}
	spec.Signal = sig
	return nil
}

// Limits on gpu_model: a list of at most maxModels names ("A100,H100"), each a short
// printable name.
const (
	maxModels   = 8
	maxModelLen = 128
)

// validateModels checks the form of gpu_model, a model name or a comma-separated list of
// models the job accepts, before any node is consulted (so an empty cluster refuses a
// malformed list too): no empty element, no repeats, at most maxModels names, each at
// most maxModelLen printable characters. A list is stored without the spaces around its
// names (a single name is kept as given); checkFits then resolves the names against the
// nodes.
func validateModels(job *api.JobSpec) *api.Error {
	spec := job.GPUModel
	if spec == "" {
		return nil
	}
	names := strings.Split(spec, ",")
	if len(names) > maxModels {
		return invalid("gpu_model", "lists %d models; at most %d are allowed", len(names), maxModels)
	}
	for i, name := range names {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return invalid("gpu_model", "%q has an empty model name; list models as A100,H100", spec)
		case len(name) > maxModelLen:
			return invalid("gpu_model", "model names are at most %d characters, got %d", maxModelLen, len(name))
		case strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }):
			return invalid("gpu_model", "%q is not a printable model name", name)
		}
		if slices.ContainsFunc(names[:i], func(other string) bool { return strings.EqualFold(other, name) }) {
			return invalid("gpu_model", "lists %s twice", name)
		}
		names[i] = name
	}
	if len(names) > 1 {
		job.GPUModel = strings.Join(names, ",")
	}
	return nil
}

// checkFits refuses a request that no registered node could ever hold, and resolves each
// GPU model name ("H100") to the full name the nodes report. A list of models
// ("a100, h100") is stored resolved and without spaces ("NVIDIA A100,NVIDIA H100"); every
// name in it must be one some node reports, as a single name must: a list is refused
// whole rather than trimmed to its known models, so a typo never narrows a job silently.
// With no node registered yet it cannot judge, and the job waits with a reason instead.
func checkFits(spec *api.JobSpec, st *cluster.State) *api.Error {
	if !st.HasNodes() {
		return nil
	}
	models := []string{""} // any model
	if spec.GPUModel != "" {
		known := st.GPUModelNames()
		models = models[:0]
		for _, name := range strings.Split(spec.GPUModel, ",") {
			model, err := resolveModel(name, known)
			if err != nil {
				return err
			}
			if slices.Contains(models, model) {
				return invalid("gpu_model", "lists %s twice (as %s)", model, name)
			}
			models = append(models, model)
		}
		spec.GPUModel = strings.Join(models, ",")
	}
	perNode := spec.GPUs
	if spec.Nodes > 1 {
		perNode = spec.GPUsPerNode
	}
	// A job runs on one model, a gang's nodes included: count the fitting nodes per model
	// and judge by the model with most. The state keeps the nodes grouped by their GPUs
	// of each model, so this looks at no node with too few.
	want := max(spec.Nodes, 1)
	best, fitting := 0, 0
	for _, model := range models {
		n, b := st.FittingNodes(model, perNode, spec.CPUs, spec.MemoryMB, want)
		best, fitting = max(best, b), max(fitting, n)
		if fitting >= want {
			return nil
		}
	}
	what := "GPUs"
	if spec.GPUModel != "" {
		what = strings.Join(models, " or ") + " GPUs"
	}
	switch {
	case perNode > best:
		return invalid("gpus", "no node has %d %s; the largest has %d", perNode, what, best)
	case fitting == 0:
		return invalid("cpus", "no node has %d GPUs together with %d CPUs and %d MB of memory", perNode, spec.CPUs, spec.MemoryMB)
	}
	return invalid("nodes", "the job needs %d nodes with %d %s each; only %d such nodes exist", want, perNode, what, fitting)
}

// takesModel reports whether a job's gpu_model, as stored (one full name, a list of them
// or "" for any), accepts GPUs of the model.
func takesModel(spec, model string) bool {
	return spec == "" || spec == model || slices.Contains(cluster.GPUModels(spec), model)
}

// resolveModel finds the model known (every model some node reports, sorted) that want
// names: itself, or the only one whose name contains it, ignoring case.
func resolveModel(want string, known []string) (string, *api.Error) {
	if slices.Contains(known, want) {
		return want, nil
	}
	var matches []string
	for _, m := range known {
		if strings.Contains(strings.ToLower(m), strings.ToLower(want)) {
			matches = append(matches, m)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		if len(known) == 0 {
			return "", invalid("gpu_model", "no node has GPU model %q: no node has any GPU", want)
		}
		return "", invalid("gpu_model", "no node has GPU model %q; models are: %s", want, strings.Join(known, ", "))
	}
	return "", invalid("gpu_model", "%q matches several models (%s); give the full name", want, strings.Join(matches, ", "))
}

func fmtSeconds(s int64) string {
	switch {
	case s%day == 0:
		return fmt.Sprintf("%dd", s/day)
	case s%hour == 0:
		return fmt.Sprintf("%dh", s/hour)
	case s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	}
	return fmt.Sprintf("%ds", s)
}

// validateDeps refuses dependencies on jobs that do not exist. A job can only depend on jobs
// submitted before it, so a cycle of dependencies cannot be formed.
func validateDeps(spec *api.JobSpec, st *cluster.State) *api.Error {
	if len(spec.After)+len(spec.AfterOK) > 1000 {
		return invalid("after", "a job may depend on at most 1000 jobs")
	}
	for field, ids := range map[string][]int64{"after": spec.After, "after_ok": spec.AfterOK} {
		for _, id := range ids {
			if _, ok := st.StateOf(id); !ok { // an evicted job is known by its final state
				return invalid(field, "no job %d to depend on", id)
			}
		}
	}
	return nil
}

// Array limits: enough for a large sweep, small enough that one submit stays one quick commit.
const (
	maxArrayIndex = 999_999
	maxArrayJobs  = 10_000
)

// parseArray reads an array spec: comma-separated items, each an index N, a range A-B or a
// stepped range A-B:S, then optionally %L, the most jobs of the array active at once.
// "0-99%8" is a hundred jobs, eight at a time.
func parseArray(spec string) ([]int, int, *api.Error) {
	bad := func(format string, args ...any) ([]int, int, *api.Error) {
		return nil, 0, invalid("array", "%q: %s (forms: 0-99, 0-99%%8, 1,3,5, 0-10:2)", spec, fmt.Sprintf(format, args...))
	}
	body, limitStr, hasLimit := strings.Cut(spec, "%")
	limit := 0
	if hasLimit {
		n, err := atoiDigits(limitStr)
		if err != nil || n < 1 {
			return bad("the limit after %% must be a positive number")
		}
		limit = n
	}
	seen := map[int]bool{}
	var out []int
	for _, item := range strings.Split(body, ",") {
		rng, stepStr, hasStep := strings.Cut(item, ":")
		lo, hi, isRange := strings.Cut(rng, "-")
		a, err := atoiDigits(lo)
		if err != nil || a < 0 || a > maxArrayIndex {
			return bad("%q is not an index from 0 to %d", lo, maxArrayIndex)
		}
		b, step := a, 1
		if isRange {
			if b, err = atoiDigits(hi); err != nil || b < a || b > maxArrayIndex {
				return bad("%q is not a range low-high with high at most %d", rng, maxArrayIndex)
			}
		}
		if hasStep {
			if step, err = atoiDigits(stepStr); err != nil || step < 1 || !isRange {
				return bad("the step after : must be a positive number after a range")
			}
		}
		for i := a; i <= b; i += step {
			if seen[i] {
				return bad("index %d appears twice", i)
			}
			seen[i] = true
			out = append(out, i)
			if len(out) > maxArrayJobs {
				return bad("more than %d jobs", maxArrayJobs)
			}
		}
	}
	return out, limit, nil
}

// atoiDigits reads a number of plain digits: no sign, no spaces, at most 9 digits.
func atoiDigits(s string) (int, error) {
	if s == "" || len(s) > 9 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return strconv.Atoi(s)
}

// validateTTY checks what a job with a terminal cannot be: one terminal is one process on
// one node.
func validateTTY(spec *api.JobSpec) *api.Error {
	switch {
	case !spec.TTY:
		return nil
	case spec.Nodes > 1:
		return invalid("tty", "a job with a terminal runs on one node; this one asks for nodes=%d", spec.Nodes)
	case spec.Array != "":
		return invalid("tty", "an array cannot have a terminal: each element would need its own; submit the elements as batch jobs")
	case spec.Image != "":
		return invalid("tty", "a job with a terminal runs directly on its node; a container image is not supported with tty yet")
	}
	return nil
}

// versionRange checks a version range (a job's cuda or driver, a pool's wanted versions)
// and returns it as it is stored: normalised, "" for none. A job whose range no node
// reports is accepted, since nodes are upgraded; it waits, and rota why names the
// versions the nodes report.
func versionRange(field, text string) (string, *api.Error) {
	r, err := sched.ParseVersionRange(text)
	switch {
	case errors.Is(err, sched.ErrVersionRangeEmpty):
		return "", invalid(field, "%v: no version is in all its comparisons; give a range like >=12.4,<13", err)
	case err != nil:
		return "", invalid(field, "%v", err)
	}
	return r.String(), nil
}
