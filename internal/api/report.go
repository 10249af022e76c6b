package api

import "time"

// Accounting: what the GPUs were used for, by whom, and at what cost. GET /api/v1/usage
// answers a UsageReport; `rota usage` prints it and `rota usage report` writes the monthly
// review pack from several of them.

// Usage groupings (the by= parameter of GET /api/v1/usage).
const (
	ByTeam       = "team"
	ByUser       = "user"
	ByQueue      = "queue"
	ByGPUModel   = "gpu-model"
	ByNode       = "node"
	ByDay        = "day"
	ByHourOfWeek = "hour-of-week"
	// ByProject groups by team and project: "vision/detection", and "vision/(none)" for
	// the team's jobs that name no project.
	ByProject = "project"
)

// UsageGroupings lists the valid by= values.
func UsageGroupings() []string {
	return []string{ByTeam, ByProject, ByUser, ByQueue, ByGPUModel, ByNode, ByDay, ByHourOfWeek}
}

// PackGroupings lists the groupings the monthly review pack holds: all but by project,
// which teams with projects ask for with by=project.
func PackGroupings() []string {
	return []string{ByTeam, ByUser, ByQueue, ByGPUModel, ByNode, ByDay, ByHourOfWeek}
}

// UsageRow is one group of a usage report: what the attempts of the group used inside the
// report's window. An attempt's GPU time is split by the window and, for day and
// hour-of-week, by the bucket its seconds fall in; per node and model by its ranks. What
// happens at an instant (a wait at the assignment; an end, with its preemption and the
// waste) lands in the group of that instant and of the attempt's first rank. So the
// GPU-hours, costs and counts of the rows add up to the total's.
type UsageRow struct {
	// Key is the group: a team, user, queue, GPU model, node, day ("2026-11-30", UTC) or
	// hour of week ("Mon 14", UTC). The total row's key is "total".
	Key string `json:"key"`
	// Jobs counts distinct jobs with an attempt in the group; Attempts their attempts.
	// A job in several groups (a run across midnight, a gang on two nodes) counts in
	// each, and once in the total: for team, user and queue the rows add up to the
	// total, for the other groupings they may add up to more.
	Jobs     int `json:"jobs"`
	Attempts int `json:"attempts"`
	// GPUHours is allocated: GPUs held × time held (assigned to end, or now).
	GPUHours float64 `json:"gpu_hours"`
	// EffectiveGPUHours is allocated × measured utilisation, over the attempts that have
	// telemetry; MeasuredGPUHours is the allocated GPU-hours those attempts account for,
	// so EffectiveGPUHours/MeasuredGPUHours is the utilisation where it is known. Both are
	// zero and UtilizationPct is nil when no attempt of the group has telemetry.
	EffectiveGPUHours float64  `json:"effective_gpu_hours"`
	MeasuredGPUHours  float64  `json:"measured_gpu_hours"`
	UtilizationPct    *float64 `json:"utilization_pct,omitempty"`
	// IdleGPUHours is allocated GPU time while the job was flagged idle (IdleSince). The
	// server keeps only a job's current flag, so this is known for the current or last
	// attempt of each job and its last idle spell only: a lower bound.
	IdleGPUHours float64 `json:"idle_gpu_hours"`
	// Succeeded and Failed count attempts that ended in the window (Failed: any end but
	// success; preemptions and cancels are counted apart in Failures' categories too).
	Succeeded   int      `json:"succeeded"`
	Failed      int      `json:"failed"`
	SuccessRate *float64 `json:"success_rate,omitempty"`
	// Failures counts ended attempts by reason category (exit_code, oom, gpu_error,
	// node_lost, timeout, idle_reclaimed, preempted, cancelled, start_error, ...).
	Failures map[string]int `json:"failures,omitempty"`
	// Assigned counts the group's attempts assigned in the window; WaitP50Seconds and
	// WaitP95Seconds are of their waits (submit, or previous attempt's end, to
	// assignment), both zero when Assigned is.
	Assigned       int     `json:"assigned"`
	WaitP50Seconds float64 `json:"wait_p50_s"`
	WaitP95Seconds float64 `json:"wait_p95_s"`
	// Preemptions counts preempted attempts; PreemptionWasteGPUHours the GPU time they had
	// run since their last checkpoint (or since they started, without one).
	Preemptions             int     `json:"preemptions"`
	PreemptionWasteGPUHours float64 `json:"preemption_waste_gpu_hours"`
	// CapacityGPUHours is the GPUs of the nodes known now, lost ones excepted, × the
	// hours of the window up to now (for day and hour-of-week, of the bucket; for node and
	// gpu-model, of its GPUs only). Rows carry it for node, gpu-model, day and
	// hour-of-week, the total for every grouping. IdleCapacityGPUHours is the capacity
	// nobody held. Capacity is today's inventory: nodes added or removed during the
	// window are not tracked.
	CapacityGPUHours     float64 `json:"capacity_gpu_hours,omitempty"`
	IdleCapacityGPUHours float64 `json:"idle_capacity_gpu_hours,omitempty"`
	// Cost is GPU-hours × the price of the GPU model, where prices are set; nil when no
	// GPU-hour of the group has a price.
	Cost *float64 `json:"cost,omitempty"`
	// DeadlinesMet and DeadlinesMissed count the jobs whose deadline fell due in the
	// window and was decided (Job.DeadlineResult), in the group of that instant.
	DeadlinesMet    int `json:"deadlines_met,omitempty"`
	DeadlinesMissed int `json:"deadlines_missed,omitempty"`
}

// UsageReport is the answer to GET /api/v1/usage.
type UsageReport struct {
	By    string    `json:"by"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Rows are sorted by key (teams, users, ... by name; days and hours in time order).
	Rows []UsageRow `json:"rows"`
	// Total adds up the rows (waits and utilisation over all attempts, not summed).
	Total UsageRow `json:"total"`
	// Currency labels Cost, from the prices ("" when none is set).
	Currency string `json:"currency,omitempty"`
	// Notes say what the figures cannot know, e.g. attempts without telemetry.
	Notes []string `json:"notes,omitempty"`
}

// Price is what one GPU-hour of a model costs.
type Price struct {
	Model      string  `json:"model"`
	PerGPUHour float64 `json:"per_gpu_hour"`
	// Currency is a free label such as "USD" or "EUR".
	Currency string `json:"currency,omitempty"`
}

// PriceList is the answer to GET /api/v1/prices.
type PriceList struct {
	Prices []Price `json:"prices"`
}

// Notification events.
const (
	NotifyStarted     = "started"
	NotifySucceeded   = "succeeded"
	NotifyFailed      = "failed"
	NotifyEnded       = "ended" // any end: succeeded, failed, cancelled, timeout
	NotifyPreempted   = "preempted"
	NotifyIdleWarning = "idle_warning"
	NotifyNodeLost    = "node_lost"
	// NotifyRequest tells of a request (see Request) filed, decided, expired or ended. It
	// goes only to webhooks that name it: the asker's and their team's, and, for a request
	// filed, those of the operators and admins who decide.
	NotifyRequest = "request"
	// NotifyBudget tells a team that it or one of its projects passed the soft or hard
	// limit of a GPU-hour budget, once per period and limit. It goes to the team's
	// webhooks that name it or name no events.
	NotifyBudget = "budget"
)

// NotifyEvents lists every notification event.
func NotifyEvents() []string {
	return []string{NotifyStarted, NotifySucceeded, NotifyFailed, NotifyEnded, NotifyPreempted, NotifyIdleWarning, NotifyNodeLost, NotifyRequest, NotifyBudget}
}

// Notify is a webhook: a JSON POST of a Notification to URL on the events named (empty:
// started, ended, preempted, idle_warning, node_lost).
type Notify struct {
	URL    string   `json:"url" yaml:"url"`
	Events []string `json:"events,omitempty" yaml:"events"`
}

// Notifications are the cluster's webhook settings (PUT /api/v1/config).
type Notifications struct {
	// Secret signs every webhook: the Rota-Signature header is
	// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>". Empty: unsigned.
	Secret string `json:"secret,omitempty" yaml:"secret"`
	// URLPrefixes, when not empty, are the only URL prefixes webhooks may go to
	// (e.g. "https://hooks.example.com/"), so a job cannot make the server call
	// anything else.
	URLPrefixes []string `json:"url_prefixes,omitempty" yaml:"url_prefixes"`
}

// Notification is the body of a webhook POST.
type Notification struct {
	// ID is unique per notification; a retried delivery keeps it.
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Cluster string    `json:"cluster,omitempty"`
	// Job is the job as it stands (its spec's environment left out).
	Job     *NotificationJob `json:"job,omitempty"`
	Node    string           `json:"node,omitempty"`
	Message string           `json:"message,omitempty"`
	// Request is the request a "request" notification tells of, as it now stands.
	Request *Request `json:"request,omitempty"`
}

// NotificationJob is the part of a job a notification carries.
type NotificationJob struct {
	ID       int64    `json:"id"`
	Name     string   `json:"name,omitempty"`
	User     string   `json:"user"`
	Team     string   `json:"team"`
	Queue    string   `json:"queue"`
	State    JobState `json:"state"`
	Reason   string   `json:"reason,omitempty"`
	Message  string   `json:"message,omitempty"`
	Attempt  int      `json:"attempt"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Nodes    []string `json:"nodes,omitempty"`
}

// UILink is the answer to POST /api/v1/ui/links: a one-time link that logs a browser in as
// the caller (what `rota ui` opens).
type UILink struct {
	// Path is the page to open on the server, with the one-time code in its fragment.
	Path string `json:"path"`
	// URL is the whole link, when the server knows an address browsers reach it at (the
	// one it was told it listens on, or the one the request came in on); empty otherwise,
	// e.g. for a request on the local socket of a server not told its address.
	URL     string    `json:"url,omitempty"`
	Expires time.Time `json:"expires"`
}

// UISessionRequest is the body of POST /api/v1/ui/session: the code of a one-time link.
type UISessionRequest struct {
	Code string `json:"code"`
}
