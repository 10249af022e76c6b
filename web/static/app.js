// rota web UI: a few pages drawn from the REST API with the visitor's token.
//
// Everything shown comes from the API and is put in the page as text (textContent,
// createTextNode), never as HTML. The token lives in sessionStorage: it goes when the tab
// closes. Charts are inline SVG drawn below; there is no library and no build step.
'use strict';

(function () {
  const TOKEN = 'rota.token';
  const SESSION = 'rota.session'; // the ID of a token made from a one-time link, revoked at logout
  const LOG_KEEP = 256 * 1024; // characters of log kept on the page
  let me = null; // GET /api/v1/whoami
  let gen = 0; // bumped at every navigation: timers and answers of an older page stop
  let timers = [];

  // ---- DOM helpers --------------------------------------------------------------------

  // el makes an element: attrs sets properties (class, href, title, dataset...), children
  // are nodes or strings (as text), null skipped.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function setAttrs(e, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === 'class') e.className = v;
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
      else if (k === 'text') e.textContent = v;
      else e[k] = v;
    }
  }

  const SVGNS = 'http://www.w3.org/2000/svg';
  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function table(headers, rows, opts) {
    const t = el('table', { class: (opts && opts.class) || '' });
    t.appendChild(el('thead', null, el('tr', null, headers.map((h) => el('th', { class: isNumHeader(h) ? 'num' : '' }, typeof h === 'object' ? h.label : h)))));
    const body = el('tbody');
    for (const r of rows) {
      const tr = el('tr', r.attrs || null);
      r.cells.forEach((c, i) => tr.appendChild(el('td', { class: isNumHeader(headers[i]) ? 'num' : '' }, c)));
      body.appendChild(tr);
    }
    t.appendChild(body);
    return t;
  }
  function isNumHeader(h) { return typeof h === 'object' && h.num; }

  function jobLink(id) { return el('a', { href: '#/jobs/' + encodeURIComponent(id) }, String(id)); }
  function badge(state) { return el('span', { class: 'badge ' + String(state || '').replace(/[^A-Z_]/g, '') }, state || '-'); }

  // ---- formatting ---------------------------------------------------------------------

  function fmtTime(iso) {
    if (!iso) return '-';
    const d = new Date(iso);
    return isNaN(d) ? '-' : d.toLocaleString();
  }
  function fmtDur(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return '-';
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return sec + 's';
    const m = Math.floor(sec / 60), s = sec % 60;
    if (m < 60) return m + 'm' + (s ? ' ' + s + 's' : '');
    const h = Math.floor(m / 60);
    if (h < 48) return h + 'h' + (m % 60 ? ' ' + (m % 60) + 'm' : '');
    return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
  }
  function since(iso) { return iso ? fmtDur((Date.now() - new Date(iso)) / 1000) : '-'; }
  function until(iso) {
    if (!iso) return '-';
    const s = (new Date(iso) - Date.now()) / 1000;
    return s <= 0 ? 'now' : 'in ' + fmtDur(s);
  }
  function num(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return '-';
    return Number(v).toFixed(digits === undefined ? 1 : digits);
  }
  function pct(v) { return v === null || v === undefined ? '-' : Math.round(v) + '%'; }
  const terminal = (s) => ['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT'].includes(s);

  // ---- the API ------------------------------------------------------------------------

  // APIError is a refusal of the API: its status, message and the field at fault (if any).
  class APIError extends Error {
    constructor(status, message, field) { super(message); this.status = status; this.field = field || ''; }
  }

  // errText says what went wrong in one line, naming the field the API found at fault.
  function errText(e) {
    return e.field && !e.message.startsWith(e.field + ':') ? e.field + ': ' + e.message : e.message;
  }

  function token() { return sessionStorage.getItem(TOKEN); }

  // reads runs at most six reads at once: the server lets each user have a few in flight
  // (limits.max_reads_in_flight, 16 by default), and a page that reads the telemetry of
  // fifty nodes must not spend them all. putOff counts the reads the server put off.
  const reads = {
    free: 6, queue: [], putOff: 0,
    take() { if (this.free > 0) { this.free--; return Promise.resolve(); } return new Promise((r) => this.queue.push(r)); },
    give() { const next = this.queue.shift(); if (next) next(); else this.free++; },
  };
  window.rotaReads = reads; // for the browser tests

  // api calls the REST API and answers the decoded JSON; a non-2xx answer throws an
  // APIError with the server's message. opts: method, json (a body), raw (answer the
  // Response), token (instead of the stored one), anonymous.
  async function api(path, opts) {
    opts = opts || {};
    const headers = { Accept: 'application/json' };
    const tok = opts.token || token();
    if (tok && !opts.anonymous) headers.Authorization = 'Bearer ' + tok;
    const init = { method: opts.method || 'GET', headers, credentials: 'omit', cache: 'no-store' };
    if (opts.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(opts.json);
    }
    const read = init.method === 'GET';
    let resp;
    if (read) await reads.take();
    try {
      // A read the server puts off (429: the user's read budget) is asked again when
      // Retry-After says, for up to a minute; reads change nothing.
      for (const giveUp = Date.now() + 60000; ;) {
        resp = await fetch(path, init);
        if (!read || resp.status !== 429) break;
        const wait = Math.max(1, Number(resp.headers.get('Retry-After')) || 1) * 1000;
        if (Date.now() + wait > giveUp) break;
        reads.putOff++;
        await new Promise((r) => setTimeout(r, wait));
      }
    } catch (e) {
      throw new APIError(0, 'the server cannot be reached (' + e.message + ')');
    } finally {
      if (read) reads.give();
    }
    if (!resp.ok) {
      let msg = 'the server answered ' + resp.status + ' ' + resp.statusText, field = '';
      try {
        const body = await resp.json();
        if (body && body.message) msg = body.message;
        if (body && typeof body.field === 'string') field = body.field;
      } catch (e) { /* not JSON: keep the status */ }
      if (resp.status === 401 && !opts.anonymous && !opts.token) loggedOut(msg);
      throw new APIError(resp.status, msg, field);
    }
    if (opts.raw) return resp;
    if (resp.status === 204) return null;
    return resp.json();
  }

  // ---- login --------------------------------------------------------------------------

  async function start() {
    me = null;
    const m = location.hash.match(/^#login=([A-Za-z0-9_-]{1,200})$/);
    if (m) {
      // The code works once: take it out of the address bar and history before using it.
      history.replaceState(null, '', location.pathname + '#/');
      try {
        const t = await api('/api/v1/ui/session', { method: 'POST', json: { code: m[1] }, anonymous: true });
        sessionStorage.setItem(TOKEN, t.token);
        sessionStorage.setItem(SESSION, t.id);
      } catch (e) {
        showLogin('That login link did not work: ' + e.message);
        return;
      }
    }
    if (!token()) {
      showLogin('');
      return;
    }
    try {
      me = await api('/api/v1/whoami');
    } catch (e) {
      if (e.status !== 401) showLogin('Cannot log in: ' + e.message);
      return;
    }
    const top = document.getElementById('top');
    top.hidden = false;
    document.getElementById('me').textContent = me.user + ' (' + me.role + ')';
    route();
  }

  function showLogin(message) {
    stopTimers();
    document.getElementById('top').hidden = true;
    const input = el('input', { type: 'password', id: 'token', placeholder: 'rota_…', autocomplete: 'off', required: true });
    const msg = el('p', { class: 'error', id: 'login-error' }, message || '');
    const form = el('form', { class: 'card login', id: 'login' },
      el('h1', null, 'Log in to rota'),
      el('p', null, 'Paste an API token (', el('code', null, 'rota admin token create'), ' or the data dir\'s admin-token), or run ',
        el('code', null, 'rota ui'), ' on the server\'s machine to open a page that is logged in already.'),
      input, el('button', { type: 'submit' }, 'Log in'), msg);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const tok = input.value.trim();
      try {
        await api('/api/v1/whoami', { token: tok });
      } catch (e) {
        msg.textContent = e.message;
        return;
      }
      sessionStorage.setItem(TOKEN, tok);
      sessionStorage.removeItem(SESSION);
      if (!location.hash.startsWith('#/')) history.replaceState(null, '', location.pathname + '#/');
      start();
    });
    const main = document.getElementById('main');
    main.replaceChildren(form);
    main.dataset.page = 'login';
    input.focus();
  }

  // loggedOut answers a 401 on a page: the token expired or was revoked.
  function loggedOut(message) {
    sessionStorage.removeItem(TOKEN);
    sessionStorage.removeItem(SESSION);
    me = null;
    showLogin('You were logged out: ' + message);
  }

  async function logout() {
    const session = sessionStorage.getItem(SESSION);
    if (session) {
      // A token the link made is this tab's alone: revoke it rather than leave it live.
      try { await api('/api/v1/tokens/' + encodeURIComponent(session), { method: 'DELETE' }); } catch (e) { /* logged out anyway */ }
    }
    sessionStorage.removeItem(TOKEN);
    sessionStorage.removeItem(SESSION);
    me = null;
    showLogin('Logged out.');
  }

  // ---- routing ------------------------------------------------------------------------

  function stopTimers() {
    gen++;
    timers.forEach((t) => clearTimeout(t));
    timers = [];
  }

  // every runs fn now and then every ms while the page it was started for is shown, until
  // fn answers false. The first run's error is thrown to the caller; later ones are left
  // for the next tick to mend.
  function every(ms, fn) {
    const g = gen;
    let first = true;
    const tick = async () => {
      if (g !== gen) return;
      let again = true;
      try {
        again = (await fn()) !== false;
      } catch (e) {
        if (first) throw e;
      } finally {
        first = false;
      }
      if (again && g === gen) timers.push(setTimeout(tick, ms));
    };
    return tick();
  }

  function route() {
    stopTimers();
    const g = gen;
    const path = location.hash.replace(/^#\/?/, '').split('?')[0];
    const parts = path.split('/').filter(Boolean);
    const name = parts[0] || 'overview';
    document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.nav === name || (name === 'jobs' && a.dataset.nav === 'queue')));
    const main = document.getElementById('main');
    const page = el('div', { class: 'page', dataset: { page: name } }, el('p', { class: 'muted' }, 'Loading…'));
    main.replaceChildren(page);
    main.dataset.page = name;
    const pages = { overview: overviewPage, nodes: nodesPage, queue: queuePage, jobs: jobPage, requests: requestsPage, reports: reportsPage };
    const fn = pages[name];
    if (!fn || (name === 'jobs' && !/^\d+$/.test(parts[1] || ''))) {
      page.replaceChildren(el('h1', null, 'No such page'), el('p', null, el('a', { href: '#/' }, 'Back to the overview')));
      return;
    }
    const params = new URLSearchParams(location.hash.includes('?') ? location.hash.slice(location.hash.indexOf('?') + 1) : '');
    fn(page, parts.slice(1), () => g === gen, params).catch((e) => {
      if (g !== gen) return;
      page.replaceChildren(el('h1', null, 'Could not load the page'), el('p', { class: 'error' }, e.message));
    });
  }

  // ready marks a page as drawn (tests wait for it).
  function ready(page) { page.dataset.ready = '1'; }

  // ---- GPU states ---------------------------------------------------------------------

  // TELEMETRY_NODES is how many nodes, the first by name, the overview's chart averages.
  const TELEMETRY_NODES = 50;

  const GPU_STATES = [
    ['free', 'free'], ['used', 'in use'], ['idle', 'idle, held by a job'], ['held', 'held by leftover processes'],
    ['unhealthy', 'unhealthy'], ['unavailable', 'node not taking work'],
  ];

  // gpuCells says, per node, each GPU's state, job and last reading. The node says which
  // of its GPUs jobs hold and which of those sit idle, whoever's jobs they are; jobs, those
  // the viewer may read, name the job in a cell.
  function gpuCells(nodes, jobs) {
    const byUUID = new Map();
    for (const j of jobs || []) if (!terminal(j.state)) for (const u of j.gpus || []) byUUID.set(u, j);
    return nodes.map((n) => {
      const readings = new Map(((n.telemetry && n.telemetry.gpus) || []).map((r) => [r.index, r]));
      const held = new Set(n.held_gpus || []), used = new Set(n.used_gpus || []), idle = new Set(n.idle_gpus || []);
      // As the server judges it (api.Node.TakesWork): ready, synced, health check passing.
      const takesWork = n.state === 'READY' && !n.syncing && (!n.health_check || n.health_check.ok);
      const cells = (n.gpus || []).map((g) => {
        const job = byUUID.get(g.uuid) || null;
        let state = 'free';
        if (!g.healthy || g.missing) state = 'unhealthy';
        else if (used.has(g.index)) state = idle.has(g.index) ? 'idle' : 'used';
        else if (job) state = job.idle_since ? 'idle' : 'used';
        else if (held.has(g.index)) state = 'held';
        else if (!takesWork) state = 'unavailable';
        return { gpu: g, state, job, reading: readings.get(g.index) || null };
      });
      return { node: n, cells };
    });
  }

  function legend(items) {
    return el('div', { class: 'legend' }, items.map(([cls, label]) => el('span', null, el('span', { class: 'sw ' + cls }), label)));
  }

  // ---- charts -------------------------------------------------------------------------

  // lineChart draws series [{name, points: [{t: ms, v}]}] over time, y from 0 to yMax
  // (or the data's maximum), as inline SVG.
  function lineChart(series, opts) {
    const W = opts.width || 640, H = opts.height || 200, L = 46, R = 10, T = 10, B = 26;
    const s = svgEl('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.label || 'chart' });
    let pts = series.flatMap((x) => x.points);
    if (!pts.length) return el('p', { class: 'notice' }, opts.empty || 'No data yet.');
    let t0 = Math.min(...pts.map((p) => p.t)), t1 = Math.max(...pts.map((p) => p.t));
    if (t1 - t0 < 1000) t0 = t1 - (opts.step || 60000); // one point: a level line over its step
    let yMax = opts.yMax || niceMax(Math.max(...pts.map((p) => p.v), 0) * 1.2);
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / yMax) * (H - T - B);
    for (const f of [0, 0.5, 1]) {
      s.appendChild(svgEl('line', { class: f ? 'grid' : 'axis', x1: L, x2: W - R, y1: y(yMax * f), y2: y(yMax * f) }));
      s.appendChild(svgEl('text', { x: L - 4, y: y(yMax * f) + 4, 'text-anchor': 'end' }, fmtAxis(yMax * f, opts.unit)));
    }
    s.appendChild(svgEl('text', { x: L, y: H - 6 }, new Date(t0).toLocaleTimeString()));
    s.appendChild(svgEl('text', { x: W - R, y: H - 6, 'text-anchor': 'end' }, new Date(t1).toLocaleTimeString()));
    series.forEach((ser, i) => {
      let p = ser.points.slice().sort((a, b) => a.t - b.t);
      if (p.length === 1) p = [{ t: t0, v: p[0].v }, p[0]];
      if (!p.length) return;
      const d = p.map((q, k) => (k ? 'L' : 'M') + x(q.t).toFixed(1) + ' ' + y(Math.min(q.v, yMax)).toFixed(1)).join(' ');
      const path = svgEl('path', { class: 'line s' + (i % 6), d });
      path.appendChild(svgEl('title', null, ser.name));
      s.appendChild(path);
    });
    const box = el('div', { class: 'chartbox' }, s);
    if (series.length > 1 || opts.legend) box.appendChild(legend(series.map((ser, i) => ['s' + (i % 6), ser.name])));
    return box;
  }

  // niceMax rounds v up to 1, 2 or 5 times a power of ten, for an axis's top.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
  }

  function fmtAxis(v, unit) {
    if (unit === '%') return Math.round(v) + '%';
    if (unit === 'MB') return v >= 1024 ? (v / 1024).toFixed(1) + ' GB' : Math.round(v) + ' MB';
    return Math.abs(v) >= 100 ? String(Math.round(v)) : v.toFixed(1);
  }

  // barChart draws horizontal bars: rows [{label, values: [a, b?]}]; the second value is
  // drawn over the first, lighter underneath (allocated vs effective).
  function barChart(rows, opts) {
    if (!rows.length) return el('p', { class: 'notice' }, 'Nothing to show for this window.');
    const bh = 18, gap = 6, L = 150, R = 70, W = opts.width || 640;
    const H = rows.length * (bh + gap) + 10;
    const max = Math.max(...rows.map((r) => Math.max(...r.values.map((v) => v || 0))), 0) || 1;
    const s = svgEl('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.label || 'bar chart' });
    rows.forEach((r, i) => {
      const y = 5 + i * (bh + gap);
      s.appendChild(svgEl('text', { x: L - 6, y: y + bh - 5, 'text-anchor': 'end' }, truncate(r.label, 22)));
      r.values.forEach((v, k) => {
        const w = ((v || 0) / max) * (W - L - R);
        const bar = svgEl('rect', { class: 'bar s' + (k ? 2 : 0), x: L, y: y + (k ? 3 : 0), width: Math.max(w, 0).toFixed(1), height: k ? bh - 6 : bh });
        bar.appendChild(svgEl('title', null, r.label + ': ' + num(v, 2) + ' ' + (opts.names ? opts.names[k] : '')));
        s.appendChild(bar);
      });
      s.appendChild(svgEl('text', { x: L + ((r.values[0] || 0) / max) * (W - L - R) + 4, y: y + bh - 5 }, num(r.values[0], 1)));
    });
    const box = el('div', { class: 'chartbox' }, s);
    if (opts.names) box.appendChild(legend(opts.names.map((n, k) => ['s' + (k ? 2 : 0), n])));
    return box;
  }

  function truncate(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + '…' : s; }

  // seriesPoints turns telemetry points into chart points of one field.
  function seriesPoints(points, field) {
    return (points || []).map((p) => ({ t: new Date(p.time).getTime(), v: p[field] || 0 }));
  }

  // ---- Overview -----------------------------------------------------------------------

  async function overviewPage(page, args, alive) {
    const statsBox = el('div', { class: 'stats', id: 'gpu-stats' });
    const govBox = el('div', { class: 'stats', id: 'governance-stats' });
    const utilBox = el('section', { class: 'card' }, el('h2', null, 'GPU utilisation, mean over all GPUs'), el('p', { class: 'muted' }, 'Loading…'));
    const queueBox = el('section', { class: 'card' }, el('h2', null, 'Queue depth'));
    const waitBox = el('section', { class: 'card' }, el('h2', null, 'Wait times by queue, last 30 days'), el('p', { class: 'muted' }, 'Loading…'));
    page.replaceChildren(el('h1', null, 'Overview'), statsBox, legend(GPU_STATES), govBox, utilBox, el('div', { class: 'grid2' }, queueBox, waitBox));

    await every(10000, async () => {
      // One glance: the GPUs of every node counted by state, the queues' jobs counted (a
      // listing would stop at its pages), and the first nodes, whose telemetry is drawn.
      // Its size follows what it lists, not the cluster's: at 10,000 nodes the node list
      // is megabytes.
      const top = await api('/api/v1/top?nodes=' + TELEMETRY_NODES + '&jobs=0');
      if (!alive()) return;
      const nodes = top.nodes || [], total = top.total;
      const counts = total.gpu_states;
      statsBox.replaceChildren(
        el('div', { class: 'stat' }, el('div', { class: 'n' }, String(total.gpus)), 'GPUs on ' + total.nodes + (total.nodes === 1 ? ' node' : ' nodes')),
        ...GPU_STATES.filter(([k]) => counts[k] || ['free', 'used', 'idle', 'unhealthy'].includes(k)).map(([k, label]) =>
          el('div', { class: 'stat ' + k, dataset: { state: k } }, el('div', { class: 'n' }, String(counts[k])), label)));
      await drawGovernance(govBox, total, alive);
      if (!alive()) return;

      // Queue depth: the jobs that wait (pending or held) per queue, and what runs.
      const qrows = top.queues || [];
      queueBox.replaceChildren(el('h2', null, 'Queue depth'), qrows.length
        ? table(['Queue', { label: 'Pending', num: true }, { label: 'GPUs asked by pending', num: true }, { label: 'Running', num: true }],
          qrows.map((q) => ({ attrs: { dataset: { queue: q.queue } }, cells: [q.queue || '-', String(q.pending + q.held), String(q.waiting_gpus), String(q.running)] })))
        : el('p', { class: 'notice' }, 'No job is pending or running.'),
      el('p', null, el('a', { href: '#/queue' }, 'The queue, with reasons →')));

      // Utilisation over time: the mean of the first nodes' GPUs' series, per time step.
      const tel = await Promise.all(nodes.map((n) => api('/api/v1/nodes/' + encodeURIComponent(n.name) + '/telemetry').catch(() => ({ series: [] }))));
      if (!alive()) return;
      const sum = new Map();
      let step = 60000;
      for (const t of tel) for (const s of t.series || []) {
        if (s.step_s) step = s.step_s * 1000;
        for (const p of s.points || []) {
          const k = new Date(p.time).getTime();
          const e = sum.get(k) || { n: 0, v: 0 };
          e.n++; e.v += p.gpu_util_pct || 0;
          sum.set(k, e);
        }
      }
      const mean = [...sum.entries()].map(([t, e]) => ({ t, v: e.v / e.n }));
      utilBox.replaceChildren(el('h2', null, total.nodes > nodes.length
        ? 'GPU utilisation, mean over the GPUs of the first ' + nodes.length + ' nodes of ' + total.nodes
        : 'GPU utilisation, mean over all GPUs'),
        lineChart([{ name: 'mean utilisation', points: mean }], { yMax: 100, unit: '%', step, width: 1100, height: 220, label: 'GPU utilisation over time', empty: 'No telemetry yet: agents report it every few seconds.' }));
      ready(page);

      // Wait times come from the usage report, which may not be there (or not allowed).
      try {
        const rep = await api('/api/v1/usage?by=queue');
        if (!alive()) return;
        const rows = rep.rows || [];
        waitBox.replaceChildren(el('h2', null, 'Wait times by queue, last 30 days'), rows.length
          ? table(['Queue', { label: 'Jobs', num: true }, { label: 'Wait p50', num: true }, { label: 'Wait p95', num: true }],
            rows.map((r) => ({ cells: [r.key, String(r.jobs), fmtDur(r.wait_p50_s), fmtDur(r.wait_p95_s)] })))
          : el('p', { class: 'notice' }, 'No job started in the last 30 days.'));
      } catch (e) {
        if (!alive()) return;
        waitBox.replaceChildren(el('h2', null, 'Wait times by queue, last 30 days'), el('p', { class: 'notice', id: 'waits-unavailable' }, 'Not available: ' + e.message));
      }
    });
  }

  // drawGovernance shows how many nodes need a look, how many nodes' versions drift from
  // their pool's wanted ranges and, for those who decide them, the requests waiting for a
  // decision. Each links to the nodes or the requests it counts.
  async function drawGovernance(box, total, alive) {
    const drifting = total.nodes_drifting, problems = total.nodes_with_problems || 0;
    const stats = [
      el('a', { class: 'stat problems' + (problems ? ' warn' : ''), id: 'problems-stat', href: problems ? '#/nodes?problems=true' : '#/nodes',
        title: 'not ready, lost, draining or drained, in maintenance, degraded, drifting, a GPU unhealthy, a failing health check, or leftover processes' },
      el('div', { class: 'n' }, String(problems)), problems === 1 ? 'node needs a look' : 'nodes need a look'),
      el('a', { class: 'stat drift' + (drifting ? ' warn' : ''), id: 'drift-stat', href: drifting ? '#/nodes?drifting=true' : '#/nodes' },
        el('div', { class: 'n' }, String(drifting)), drifting === 1 ? 'node drifts from its pool\'s versions' : 'nodes drift from their pool\'s versions')];
    if (mayDecide()) {
      let waiting = '?', why = '';
      try {
        const list = await api('/api/v1/requests?state=pending');
        waiting = String((list.requests || []).length);
      } catch (e) {
        why = errText(e);
      }
      if (!alive()) return;
      stats.push(el('a', { class: 'stat requests' + (waiting !== '0' ? ' warn' : ''), id: 'requests-stat', href: '#/requests', title: why || null },
        el('div', { class: 'n' }, waiting), waiting === '1' ? 'request waits for a decision' : 'requests wait for a decision'));
    }
    box.replaceChildren(...stats);
  }

  // ---- Nodes --------------------------------------------------------------------------

  // NODE_PAGE is how many nodes the Nodes page draws at once, unless the address says
  // otherwise (limit=): at eight GPUs each, 400 cells.
  const NODE_PAGE = 50;
  const NODE_STATES = ['READY', 'DRAINING', 'DRAINED', 'NOT_READY', 'LOST'];

  // The Nodes page reads one page of nodes by name, with the jobs on them, from the
  // filters and cursor in its address (#/nodes?state=&pool=&name=&drifting=&problems=&free=&after=), so
  // a view can be linked and Back goes back a page. At 10,000 nodes a page costs what it
  // shows, not the cluster.
  async function nodesPage(page, args, alive, params) {
    const limit = Math.min(1000, Math.max(1, Math.floor(Number(params.get('limit'))) || NODE_PAGE));
    const freeParam = Math.floor(Number(params.get('free')));
    const want = { name: params.get('name') || '', state: params.get('state') || '', pool: params.get('pool') || '',
      drifting: params.get('drifting') === 'true', problems: params.get('problems') === 'true',
      free: freeParam >= 1 && freeParam <= 1024 ? String(freeParam) : '' };
    // go shows the page of other filters or another cursor; the address is the page.
    const go = (changes) => {
      const q = new URLSearchParams();
      const next = Object.assign({}, want, { after: '', before: '' }, changes);
      for (const k of ['name', 'state', 'pool', 'free', 'after', 'before']) if (next[k]) q.set(k, next[k]);
      for (const k of ['drifting', 'problems']) if (next[k]) q.set(k, 'true');
      if (limit !== NODE_PAGE) q.set('limit', String(limit));
      location.hash = '#/nodes' + (q.toString() ? '?' + q : '');
    };
    const nameIn = el('input', { type: 'search', id: 'node-name', value: want.name, placeholder: 'part of a name', maxLength: 256 });
    // A list of states from the address (state=DRAINING,DRAINED) is a choice of its own.
    const stateIn = el('select', { id: 'node-state' }, el('option', { value: '' }, 'any'),
      NODE_STATES.concat(want.state && !NODE_STATES.includes(want.state) ? [want.state] : []).map((st) => el('option', { value: st, selected: st === want.state }, st)));
    const poolIn = el('select', { id: 'node-pool' }, el('option', { value: '' }, 'any'),
      want.pool ? el('option', { value: want.pool, selected: true }, want.pool) : null);
    const driftIn = el('input', { type: 'checkbox', id: 'node-drifting', checked: want.drifting });
    const problemsIn = el('input', { type: 'checkbox', id: 'node-problems', checked: want.problems });
    const freeIn = el('input', { type: 'number', id: 'node-free', min: 1, max: 1024, step: 1, value: want.free, placeholder: 'any', class: 'narrow' });
    const filters = el('form', { class: 'controls', id: 'node-filters' },
      el('label', null, 'Name', nameIn), el('label', null, 'State', stateIn), el('label', null, 'Pool', poolIn),
      el('label', { title: 'healthy, held by no job, on a node that takes work: where a job asking for that many could start now' }, 'GPUs free, at least', freeIn),
      el('label', { class: 'check' }, el('span', null, 'Version drift'), el('span', null, driftIn, ' only')),
      el('label', { class: 'check', title: 'not ready, lost, draining or drained, in maintenance, degraded, drifting, a GPU unhealthy, a failing health check, or leftover processes' },
        el('span', null, 'Problems'), el('span', null, problemsIn, ' only')));
    const apply = (ev) => {
      if (ev) ev.preventDefault();
      const free = Math.floor(Number(freeIn.value));
      go({ name: nameIn.value.trim(), state: stateIn.value, pool: poolIn.value, drifting: driftIn.checked, problems: problemsIn.checked,
        free: free >= 1 && free <= 1024 ? String(free) : '' });
    };
    filters.addEventListener('submit', apply);
    for (const i of [stateIn, poolIn, driftIn, problemsIn, freeIn]) i.addEventListener('change', apply);
    nameIn.addEventListener('change', apply);
    const range = el('div', { class: 'pager', id: 'nodes-range' });
    const list = el('div', { id: 'nodes' });
    page.replaceChildren(el('h1', null, 'Nodes'), filters, legend(GPU_STATES.concat([['', 'the fill rises with utilisation']])), range, list);
    // The pools to choose from: the glance lists them, without listing a node.
    api('/api/v1/top?nodes=0&jobs=0').then((top) => {
      if (!alive()) return;
      for (const p of top.pools || []) {
        if (p.pool && p.pool !== want.pool) poolIn.appendChild(el('option', { value: p.pool }, p.pool));
      }
    }).catch(() => { /* the pool list is a convenience: typing ?pool= still works */ });
    const filtered = want.name || want.state || want.pool || want.drifting || want.problems || want.free;
    await every(5000, async () => {
      const q = new URLSearchParams({ limit: String(limit), jobs: 'true' });
      for (const k of ['name', 'state', 'pool', 'free']) if (want[k]) q.set(k, want[k]);
      for (const k of ['drifting', 'problems']) if (want[k]) q.set(k, 'true');
      for (const k of ['after', 'before']) if (params.get(k)) q.set(k, params.get(k));
      const got = await api('/api/v1/nodes?' + q);
      if (!alive()) return;
      const nodes = got.nodes || [];
      range.replaceChildren(pagerText(got, nodes.length, 'node', 'nodes'),
        el('button', { type: 'button', id: 'nodes-prev', disabled: !got.prev, on: { click: () => go({ before: got.prev }) } }, '‹ Previous'),
        el('button', { type: 'button', id: 'nodes-next', disabled: !got.next, on: { click: () => go({ after: got.next }) } }, 'Next ›'));
      if (!nodes.length) {
        list.replaceChildren(el('p', { class: 'notice' }, got.total
          ? ['No node past this page. ', el('a', { href: '#/nodes', on: { click: (ev) => { ev.preventDefault(); go({}); } } }, 'Back to the first page')]
          : filtered ? 'No node matches these filters.' : 'No node has joined yet. Start one with rota agent --join TOKEN, or rota up.'));
      } else {
        list.replaceChildren(...gpuCells(nodes, got.jobs).map(nodeCard));
      }
      ready(page);
    });
  }

  // pagerText says which of a listing's items a page shows: "Nodes 51–100 of 10,000".
  function pagerText(got, shown, one, many) {
    const total = got.total || 0, from = (got.offset || 0) + 1;
    const what = many.charAt(0).toUpperCase() + many.slice(1);
    return el('span', { class: 'range' }, shown
      ? what + ' ' + from.toLocaleString('en') + '–' + (from + shown - 1).toLocaleString('en') + ' of ' + total.toLocaleString('en')
      : total.toLocaleString('en') + ' ' + (total === 1 ? one : many));
  }

  function nodeCard({ node: n, cells }) {
    const models = [...new Set((n.gpus || []).map((g) => g.model))].join(', ') || 'no GPUs';
    const drifts = n.drift && n.drift.length > 0;
    const info = el('dl', { class: 'kv' },
      el('dt', null, 'GPUs'), el('dd', null, (n.gpus || []).length + ' × ' + models + ' — ' + (n.gpus_used || 0) + ' allocated'),
      el('dt', null, 'Driver'), el('dd', { class: drifts ? 'warn' : '' }, (n.driver_version || '-') + ', CUDA ' + (n.cuda_version || '-') + (n.device_source ? ' (' + n.device_source + ')' : '')),
      el('dt', null, 'CPUs, memory'), el('dd', null, (n.cpus_used || 0) + ' of ' + n.cpus + ' CPUs, ' + fmtMB(n.memory_mb)),
      el('dt', null, 'Heard from'), el('dd', null, since(n.last_heartbeat) + ' ago' + (n.agent && n.agent.version ? ', agent ' + n.agent.version : '')),
      el('dt', null, 'Scheduling'), el('dd', null, drainText(n)));
    if (drifts) {
      info.append(el('dt', null, 'Version drift'), el('dd', { class: 'warn drift' },
        el('ul', { class: 'reasons' }, n.drift.map((d) => el('li', null, driftText(d))))));
    }
    if (n.maintenance) {
      info.append(el('dt', null, 'Maintenance'), el('dd', { class: 'warn' }, maintenanceText(n.maintenance)));
    }
    if (n.health_check) {
      info.append(el('dt', null, 'Health check'), el('dd', { class: n.health_check.ok ? '' : 'error' },
        (n.health_check.ok ? 'passing' : 'failing (exit ' + n.health_check.exit_code + ')') + ', ' + since(n.health_check.time) + ' ago',
        n.health_check.output && !n.health_check.ok ? el('pre', { class: 'log' }, n.health_check.output) : null));
    }
    const card = el('section', { class: 'card node', dataset: { node: n.name } },
      el('h2', null, n.name, badge(n.state), n.syncing ? el('span', { class: 'muted' }, 'syncing') : null,
        drifts ? el('span', { class: 'badge drift', title: n.drift.map(driftText).join('\n') }, 'version drift') : null), info);
    if (n.degraded && n.degraded.length) {
      card.appendChild(el('div', { class: 'warn' }, el('b', null, 'Degraded: '), el('ul', { class: 'reasons' }, n.degraded.map((d) => el('li', null, d)))));
    }
    if (n.leftovers && n.leftovers.length) {
      card.appendChild(el('div', { class: 'warn' }, el('b', null, 'Leftover processes (no job): '),
        el('ul', { class: 'reasons' }, n.leftovers.map((p) => el('li', null, 'GPU ' + p.gpu + ': pid ' + p.pid + ' ' + (p.command || '') + ' (' + fmtMB(p.memory_mb) + ')')))));
    }
    card.appendChild(el('div', { class: 'gpus' }, cells.map(gpuCell)));
    return card;
  }

  // maintenanceText is an operator's drain: its reason and window, planned or open.
  function maintenanceText(m) {
    const planned = new Date(m.start) > new Date();
    return m.reason + (planned ? ', from ' + fmtTime(m.start) : '') +
      ', until ' + (m.end ? fmtTime(m.end) : 'resumed') + (m.by ? ' (by ' + m.by + ')' : '');
  }

  // driftText is one of a node's versions outside its pool's wanted range, as the API
  // gives it: what the node reports against what the pool wants.
  function driftText(d) {
    return (d.component === 'cuda' ? 'CUDA ' : 'driver ') + (d.version || '(none reported)') + ', pool ' + d.pool + ' wants ' + d.wanted;
  }

  function drainText(n) {
    if (n.drift_drain && (n.state === 'DRAINING' || n.state === 'DRAINED')) return n.state.toLowerCase() + ' on its own: its versions drift (the pool drains on drift); it returns to service when they are back in range';
    switch (n.state) {
      case 'DRAINING': return 'draining: takes no new work, running jobs finish';
      case 'DRAINED': return 'drained: takes no new work';
      case 'NOT_READY': return 'not ready: the agent has gone quiet';
      case 'LOST': return 'lost: its jobs were requeued or failed';
      default: return n.syncing ? 'syncing with its agent' : 'takes work';
    }
  }

  function fmtMB(mb) {
    if (!mb && mb !== 0) return '-';
    return mb >= 1024 ? (mb / 1024).toFixed(mb >= 10240 ? 0 : 1) + ' GB' : mb + ' MB';
  }

  function gpuCell(c) {
    const g = c.gpu, r = c.reading, util = r ? r.utilization_pct || 0 : 0;
    const fill = el('div', { class: 'fill' });
    fill.style.height = Math.max(0, Math.min(100, util)) + '%';
    const lines = [el('b', null, 'GPU ' + g.index), r ? pct(util) + ' · ' + fmtMB(r.memory_used_mb || 0) : 'no reading'];
    if (c.job) lines.push(el('br'), el('a', { href: '#/jobs/' + c.job.id }, 'job ' + c.job.id), ' · ' + ((c.job.spec && c.job.spec.user) || ''));
    else if (c.state !== 'free') lines.push(el('br'), c.state);
    const tip = ['GPU ' + g.index + ' ' + g.model + ' (' + g.uuid + ')', 'state: ' + c.state];
    if (!g.healthy || g.missing) tip.push('health: ' + (g.health || (g.missing ? 'missing' : 'unhealthy')));
    if (r) tip.push('utilisation ' + pct(util) + ', memory ' + fmtMB(r.memory_used_mb || 0) + ' of ' + fmtMB(g.memory_mb) + (r.power_w ? ', ' + Math.round(r.power_w) + ' W' : '') + (r.temperature_c ? ', ' + Math.round(r.temperature_c) + ' °C' : ''));
    if (c.job) tip.push('job ' + c.job.id + ' (' + (c.job.spec.name || '') + ') of ' + c.job.spec.user + (c.job.idle_since ? ', idle since ' + fmtTime(c.job.idle_since) : ''));
    return el('div', { class: 'gpu-cell ' + c.state, title: tip.join('\n'), dataset: { state: c.state, gpu: String(g.index) } }, fill, el('div', { class: 'txt' }, lines));
  }

  // ---- Queue --------------------------------------------------------------------------

  // JOB_PAGE is how many jobs each list of the Queue page shows at once.
  const JOB_PAGE = 100;

  // The Queue page lists the jobs that wait and those that run, each a page at a time by
  // job ID, an array as one row, its cursor in the address (#/queue?waiting_after=ID,
  // running_before=ID), so Back goes back a page. The headings count every job the
  // viewer may read, from the glance; each refresh reads a page of each list, whatever
  // the length of the queue.
  async function queuePage(page, args, alive, params) {
    const lists = [
      { key: 'waiting', id: 'pending', title: 'Pending', states: 'PENDING,HELD', count: (t) => t.pending + t.held, empty: 'Nothing is waiting.', rows: waitingTable },
      { key: 'running', id: 'running', title: 'Running', states: 'ASSIGNED,RUNNING', count: (t) => t.running, empty: 'Nothing is running.', rows: runningTable },
    ];
    const boxes = lists.map((l) => el('section', { class: 'card', id: l.id }));
    page.replaceChildren(el('h1', null, 'Queue'), ...boxes);
    // go shows another page of one list, the other list staying where it is.
    const go = (key, dir, cursor) => {
      const q = new URLSearchParams(params);
      q.delete(key + '_after');
      q.delete(key + '_before');
      q.set(key + '_' + dir, cursor);
      location.hash = '#/queue?' + q;
    };
    await every(5000, async () => {
      const reads = lists.map((l) => {
        const q = new URLSearchParams({ state: l.states, limit: String(JOB_PAGE), arrays: 'collapse' });
        for (const dir of ['after', 'before']) if (params.get(l.key + '_' + dir)) q.set(dir, params.get(l.key + '_' + dir));
        return api('/api/v1/jobs?' + q);
      });
      const [top, ...got] = await Promise.all([api('/api/v1/top?nodes=0&jobs=0'), ...reads]);
      if (!alive()) return;
      lists.forEach((l, i) => {
        const jobs = got[i].jobs || [], all = l.count(top);
        const paged = got[i].prev || got[i].next;
        boxes[i].replaceChildren(el('h2', null, l.title + ' (' + all + ')'),
          paged ? el('div', { class: 'pager' },
            el('span', { class: 'range' }, 'showing ' + jobs.reduce((n, j) => n + (arrayOf(j) ? j.array.jobs : 1), 0).toLocaleString('en') +
              ' of ' + all.toLocaleString('en') + ' jobs, by job ID'),
            el('button', { type: 'button', id: l.id + '-prev', disabled: !got[i].prev, on: { click: () => go(l.key, 'before', got[i].prev) } }, '‹ Previous'),
            el('button', { type: 'button', id: l.id + '-next', disabled: !got[i].next, on: { click: () => go(l.key, 'after', got[i].next) } }, 'Next ›')) : null,
          jobs.length ? l.rows(jobs) : el('p', { class: 'notice' }, all && (params.get(l.key + '_after') || params.get(l.key + '_before'))
            ? ['No job past this page. ', el('a', { href: '#/queue', class: 'first-page' }, 'Back to the first page')]
            : l.empty));
      });
      ready(page);
    });
  }

  // An array the server summed up (j.array, from arrays=collapse) is one row: its ID and
  // index range, linking to its first job, with its jobs counted by state.
  function arrayOf(j) { return j.array && j.array.jobs > 1 ? j.array : null; }

  function jobCell(j) {
    const a = arrayOf(j);
    if (!a) return jobLink(j.id);
    return el('span', { class: 'array' }, el('a', { href: '#/jobs/' + encodeURIComponent(j.id) }, j.array_id + '_[' + a.first_index + '-' + a.last_index + ']'),
      el('span', { class: 'muted' }, ' ' + a.jobs + ' jobs'));
  }

  // arrayStates counts an array's jobs by state: "3 RUNNING (1 idle), 5 PENDING".
  function arrayStates(a) {
    return ['RUNNING', 'ASSIGNED', 'PENDING', 'HELD'].filter((st) => a.states[st])
      .map((st) => a.states[st] + ' ' + st + (st === 'RUNNING' && a.idle ? ' (' + a.idle + ' idle)' : '')).join(', ');
  }

  function waitingTable(jobs) {
    return table(['Job', 'Name', 'User', 'Queue', { label: 'GPUs', num: true }, 'Waiting', 'Why it waits', 'Estimated start', 'Deadline'],
      jobs.map((j) => {
        const a = arrayOf(j), est = a ? a.estimated_start : j.estimated_start;
        const why = a ? arrayStates(a) + (a.reason ? ': ' + a.reason : '')
          : j.state === 'HELD' ? 'held: ' + (j.message || 'until released') : (j.message || j.reason || '-');
        return {
          attrs: { dataset: { job: String(j.id) } },
          cells: [jobCell(j), j.spec.name || '', j.spec.user, j.spec.queue, String(j.spec.gpus || 0), since(a ? a.since : j.submit_time),
            el('span', { class: 'reason' }, why),
            est ? el('span', { title: fmtTime(est) }, until(est)) : '-', deadlineCell(j)],
        };
      }));
  }

  function runningTable(jobs) {
    return table(['Job', 'Name', 'User', 'Queue', { label: 'GPUs', num: true }, 'State', 'Nodes', 'Running for', { label: 'GPU use', num: true }, 'Deadline'],
      jobs.map((j) => {
        const a = arrayOf(j), nodes = (a ? a.nodes : j.nodes) || [];
        return {
          attrs: { dataset: { job: String(j.id) } },
          cells: [jobCell(j), j.spec.name || '', j.spec.user, j.spec.queue, String(j.spec.gpus || 0), a ? arrayStates(a) : badge(j.state),
            nodes.join(', ') || '-', since(a ? a.since : j.start_time || j.submit_time),
            a ? '-' : el('span', { class: j.idle_since ? 'warn' : '' }, j.usage && j.usage.gpu_util_pct ? pct(j.usage.gpu_util_pct.last) + (j.idle_since ? ' idle' : '') : '-'),
            deadlineCell(j)],
        };
      }));
  }

  // ---- Deadlines ----------------------------------------------------------------------

  // deadlineWhen is a job's deadline in a few words: "finish by <time>".
  function deadlineWhen(j) {
    return (j.spec.deadline_kind === 'start' ? 'start by ' : 'finish by ') + fmtTime(j.spec.deadline);
  }

  // deadlineResult is the badge of a decided deadline: met, or missed (and by how much).
  function deadlineResult(j) {
    if (!j.deadline_result) return null;
    const missed = j.deadline_result === 'missed';
    return el('span', { class: 'badge deadline ' + (missed ? 'missed' : 'met') },
      missed ? 'missed' + (j.deadline_missed_by_s ? ' by ' + fmtDur(j.deadline_missed_by_s) : '') : 'met');
  }

  // deadlineCell is a queue's Deadline column: when, the result, the API's warning.
  function deadlineCell(j) {
    if (!j.spec.deadline) return '-';
    return el('span', { class: 'deadline' }, deadlineWhen(j), ' ', deadlineResult(j),
      j.deadline_warning ? el('span', { class: 'warn deadline-warning' }, j.deadline_warning) : null);
  }

  // ---- Job ----------------------------------------------------------------------------

  async function jobPage(page, args, alive) {
    const id = args[0];
    const base = '/api/v1/jobs/' + encodeURIComponent(id);
    const head = el('div', { class: 'jobhead' });
    const actions = el('div', { class: 'actions' });
    const summary = el('section', { class: 'card', id: 'summary' });
    const why = el('section', { class: 'card', id: 'why', hidden: true });
    const charts = el('section', { class: 'card', id: 'charts' }, el('h2', null, 'GPU use'), el('p', { class: 'muted' }, 'Loading…'));
    const logPre = el('pre', { class: 'log', id: 'log', hidden: true });
    const logNote = el('p', { class: 'muted', id: 'log-note' }, 'Loading…');
    const logs = el('section', { class: 'card', id: 'logs' }, el('h2', null, 'Log (rank 0)'), logNote, logPre);
    const attempts = el('section', { class: 'card', id: 'attempts' });
    const checkpoints = el('section', { class: 'card', id: 'checkpoints' });
    const timeline = el('section', { class: 'card', id: 'timeline' });
    page.replaceChildren(head, actions, summary, why, charts, logs, attempts, checkpoints, timeline);

    let job = await api(base);
    if (!alive()) return;
    const draw = () => {
      drawJobHead(head, actions, job, base, () => refresh());
      drawSummary(summary, job);
      drawAttempts(attempts, job);
      drawCheckpoints(checkpoints, job);
      drawTimeline(timeline, job);
    };
    const refresh = async () => {
      const j = await api(base);
      if (!alive()) return;
      job = j;
      draw();
    };
    draw();
    ready(page);

    // The job's state, why and chart refresh every 5 s while it lives.
    let first = true;
    every(5000, async () => {
      if (!first) {
        if (terminal(job.state) && charts.dataset.drawn) return false; // nothing changes any more
        await refresh();
      }
      first = false;
      if (job.state === 'PENDING' || job.state === 'HELD') {
        try {
          const w = await api(base + '/why');
          if (!alive()) return;
          why.hidden = false;
          why.replaceChildren(el('h2', null, 'Why it waits'), el('ul', { class: 'reasons' }, (w.reasons || []).map((r) => el('li', null, r))),
            w.estimated_start ? el('p', null, 'Estimated start: ' + fmtTime(w.estimated_start) + ' (' + until(w.estimated_start) + ')') : el('p', { class: 'muted' }, 'No estimated start.'));
        } catch (e) {
          why.hidden = false;
          why.replaceChildren(el('h2', null, 'Why it waits'), el('p', { class: 'error' }, e.message));
        }
      } else {
        why.hidden = true;
      }
      if (!job.attempts) {
        charts.replaceChildren(el('h2', null, 'GPU use'), el('p', { class: 'notice' }, 'No telemetry until the job is placed.'));
        return;
      }
      try {
        const tel = await api(base + '/telemetry');
        if (!alive()) return;
        const series = tel.series || [];
        const step = series.length && series[0].step_s ? series[0].step_s * 1000 : 10000;
        const name = (s) => 'attempt ' + s.attempt + (series.length > 1 ? ' on ' + (s.node || '?') : '');
        charts.replaceChildren(el('h2', null, 'GPU use'),
          el('div', { class: 'grid2' },
            el('div', { id: 'util-chart' }, el('h3', null, 'Utilisation'), lineChart(series.map((s) => ({ name: name(s), points: seriesPoints(s.points, 'gpu_util_pct') })), { yMax: 100, unit: '%', step, label: 'GPU utilisation', empty: 'No telemetry for this job (yet).' })),
            el('div', { id: 'mem-chart' }, el('h3', null, 'GPU memory'), lineChart(series.map((s) => ({ name: name(s), points: seriesPoints(s.points, 'gpu_memory_mb') })), { unit: 'MB', step, label: 'GPU memory', empty: 'No telemetry for this job (yet).' }))));
        charts.dataset.drawn = '1';
      } catch (e) {
        charts.replaceChildren(el('h2', null, 'GPU use'), el('p', { class: 'error' }, e.message));
        charts.dataset.drawn = '1';
      }
    }).catch(() => {});

    followLog(base, logPre, logNote, alive);
  }

  function drawJobHead(head, actions, job, base, refresh) {
    head.replaceChildren(el('h1', null, 'Job ' + job.id + (job.spec.name ? ' · ' + job.spec.name : '')), badge(job.state));
    actions.replaceChildren();
    const mayCancel = !terminal(job.state) && me && (me.role === 'admin' || me.role === 'operator' || (me.role === 'member' && job.spec.user === me.user));
    if (!mayCancel) return;
    // Two clicks: the first arms the button for a few seconds.
    const msg = el('span', { class: 'error', id: 'cancel-error' });
    const btn = el('button', { type: 'button', class: 'danger', id: 'cancel' }, 'Cancel job');
    let armed = null;
    btn.addEventListener('click', async () => {
      if (!armed) {
        btn.textContent = 'Click again to cancel job ' + job.id;
        btn.classList.add('armed');
        armed = setTimeout(() => { armed = null; btn.textContent = 'Cancel job'; btn.classList.remove('armed'); }, 5000);
        return;
      }
      clearTimeout(armed);
      btn.disabled = true;
      try {
        await api(base + '/cancel', { method: 'POST' });
        msg.className = 'muted';
        msg.textContent = ' Cancelled.';
        await refresh();
      } catch (e) {
        btn.disabled = false;
        armed = null;
        btn.textContent = 'Cancel job';
        btn.classList.remove('armed');
        msg.className = 'error';
        msg.textContent = ' ' + e.message;
      }
    });
    actions.append(btn, msg);
  }

  function drawSummary(box, job) {
    const s = job.spec;
    const ask = [(s.gpus || 0) + ' GPU' + (s.gpus === 1 ? '' : 's') + (s.gpu_model ? ' ' + s.gpu_model : ''), (s.cpus || 0) + ' CPUs', s.memory_mb ? fmtMB(s.memory_mb) : null, s.nodes > 1 ? s.nodes + ' nodes' : null].filter(Boolean).join(', ');
    const dl = el('dl', { class: 'kv' },
      el('dt', null, 'Owner'), el('dd', null, s.user + ', team ' + s.team + ', queue ' + s.queue),
      el('dt', null, 'Asked for'), el('dd', null, ask + ', time limit ' + fmtDur(s.time_limit_s)),
      el('dt', null, 'Command'), el('dd', null, el('code', { class: 'cmd' }, (s.command || []).join(' '))),
      el('dt', null, 'Submitted'), el('dd', null, fmtTime(job.submit_time)),
      el('dt', null, 'Started'), el('dd', null, fmtTime(job.start_time)),
      el('dt', null, 'Ended'), el('dd', null, fmtTime(job.end_time)),
      el('dt', null, 'Where'), el('dd', null, (job.nodes || []).join(', ') || '-'),
      el('dt', null, 'Status'), el('dd', { id: 'job-message' }, [job.reason, job.message].filter(Boolean).join(': ') || '-'));
    if (job.exit_code !== null && job.exit_code !== undefined) dl.append(el('dt', null, 'Exit code'), el('dd', null, String(job.exit_code)));
    if (s.deadline) {
      dl.append(el('dt', null, 'Deadline'), el('dd', { id: 'job-deadline' },
        deadlineWhen(job) + (job.deadline_result ? ' ' : new Date(s.deadline) > Date.now() ? ' (' + until(s.deadline) + ') ' : ' (passed) '), deadlineResult(job),
        job.deadline_warning ? el('div', { class: 'warn', id: 'deadline-warning' }, job.deadline_warning) : null));
    }
    if (job.estimated_start && !terminal(job.state)) dl.append(el('dt', null, 'Estimated start'), el('dd', null, fmtTime(job.estimated_start) + ' (' + until(job.estimated_start) + ')'));
    if (job.usage && job.usage.gpu_util_pct) dl.append(el('dt', null, 'GPU use'), el('dd', null, 'mean ' + pct(job.usage.gpu_util_pct.mean) + ', last ' + pct(job.usage.gpu_util_pct.last) + (job.usage.gpu_memory_mb ? ', memory up to ' + fmtMB(Math.round(job.usage.gpu_memory_mb.max)) : '')));
    if (job.idle_since) dl.append(el('dt', null, 'Idle'), el('dd', { class: 'warn' }, 'every GPU idle since ' + fmtTime(job.idle_since)));
    box.replaceChildren(el('h2', null, 'Summary'), dl);
  }

  function drawAttempts(box, job) {
    const list = job.attempt_list || [];
    box.replaceChildren(el('h2', null, 'Attempts'), list.length
      ? table(['#', 'State', 'Placement', 'Assigned', 'Started', 'Ended', 'Exit', 'Outcome'], list.map((a) => ({
        cells: [String(a.attempt), badge(a.state), (a.placements || []).map((p) => p.node + ' GPUs ' + ((p.gpu_indices || []).join(',') || '-')).join('; '),
          fmtTime(a.assign_time), fmtTime(a.start_time), fmtTime(a.end_time), a.exit_code === null || a.exit_code === undefined ? '-' : String(a.exit_code),
          [a.reason, a.message].filter(Boolean).join(': ') || '-'],
      })))
      : el('p', { class: 'notice' }, 'No attempt yet.'));
  }

  function drawCheckpoints(box, job) {
    const cps = (job.events || []).filter((e) => e.kind === 'checkpoint');
    box.replaceChildren(el('h2', null, 'Checkpoints'), cps.length
      ? table(['When', 'Attempt', 'Checkpoint'], cps.map((e) => ({ cells: [fmtTime(e.time), String(e.attempt || '-'), e.message || '-'] })))
      : el('p', { class: 'notice' }, 'No checkpoint reported. ' + (job.checkpoints || '')));
  }

  function drawTimeline(box, job) {
    const evs = (job.events || []).slice().sort((a, b) => new Date(a.time) - new Date(b.time) || a.id - b.id);
    box.replaceChildren(el('h2', null, 'Timeline'), evs.length
      ? el('ol', { class: 'timeline' }, evs.map((e) => el('li', { class: e.kind },
        el('span', { class: 'when' }, fmtTime(e.time)), el('span', { class: 'kind' }, e.kind + (e.to ? ' → ' + e.to : '')),
        e.attempt ? el('span', { class: 'muted' }, 'attempt ' + e.attempt + ' ') : null,
        e.message || '', e.actor ? el('span', { class: 'muted' }, ' (' + e.actor + ')') : null)))
      : el('p', { class: 'notice' }, 'No events.'));
  }

  // followLog polls the log of rank 0 every 2 s from where it left off, pinned to the
  // attempt its first bytes came from, until the log is done. A server it cannot reach
  // (restarting, failing over) it asks again.
  function followLog(base, pre, note, alive) {
    let offset = 0, attempt = 0, text = '';
    const decoder = new TextDecoder();
    every(2000, async () => {
      const q = new URLSearchParams({ offset: String(offset) });
      if (attempt) q.set('attempt', String(attempt));
      let resp;
      try {
        resp = await api(base + '/logs?' + q, { raw: true });
      } catch (e) {
        if (!alive()) return false;
        // A server restarting or failing over comes back: the log goes on from offset.
        const lost = e.status === 0 || e.status === 502 || e.status === 503 || e.status === 504;
        note.textContent = 'The log cannot be read: ' + e.message + (lost ? '; trying again every 2 s…' : '');
        return lost;
      }
      const buf = await resp.arrayBuffer();
      if (!alive()) return;
      const a = Number(resp.headers.get('X-Rota-Log-Attempt') || 0);
      if (a && !attempt) attempt = a;
      offset += buf.byteLength;
      if (buf.byteLength) {
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        text += decoder.decode(buf, { stream: true });
        if (text.length > LOG_KEEP) text = '…' + text.slice(text.length - LOG_KEEP);
        pre.textContent = text;
        pre.hidden = false;
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      }
      const done = resp.headers.get('X-Rota-Log-Done') === 'true';
      const where = a ? 'attempt ' + a + (resp.headers.get('X-Rota-Log-Node') ? ' on ' + resp.headers.get('X-Rota-Log-Node') : '') : 'no attempt yet';
      const incomplete = resp.headers.get('X-Rota-Log-Incomplete');
      const full = resp.headers.get('X-Rota-Log-Full');
      const held = resp.headers.get('X-Rota-Log-Held');
      note.textContent = where + ', ' + offset + ' bytes' + (done ? (incomplete ? ', incomplete: ' + incomplete : ', complete.') :
        (full ? ', running; ' + full + '.' : held ? ', following (every 2 s); ' + held + '.' : ', following (every 2 s)…'));
      return !done;
    }).catch(() => {});
  }

  // ---- Requests -----------------------------------------------------------------------

  // The form's fields are the API's (api.Request), each shown for the kinds it belongs to,
  // so a refusal naming a field points at its input.
  const REQUEST_KINDS = [['quota', 'Raise a team\'s quota'], ['queue', 'Use a restricted queue'], ['reservation', 'Reserve GPUs']];
  const REQUEST_STATES = ['pending', 'approved', 'denied', 'expired', 'ended'];
  const REQUEST_FIELDS = [
    // name, label, input attributes, kinds
    ['team', 'Team', { type: 'text', maxLength: 128 }, ['quota', 'reservation']],
    ['queue', 'Queue', { type: 'text', maxLength: 128 }, ['queue']],
    ['gpus', 'GPUs', { type: 'number', min: 1, step: 1 }, ['reservation']],
    ['gpu_model', 'GPU model', { type: 'text', maxLength: 128 }, ['quota', 'reservation']],
    ['limit', 'New limit (GPUs)', { type: 'number', min: 1, step: 1 }, ['quota']],
    ['for_s', 'For (hours; empty: the default)', { type: 'number', min: 0, step: 'any' }, ['quota', 'queue']],
    ['start', 'Start', { type: 'datetime-local' }, ['reservation']],
    ['end', 'End', { type: 'datetime-local' }, ['reservation']],
  ];
  let requestState = '';

  function mayDecide() { return !!me && (me.role === 'admin' || me.role === 'operator'); }

  async function requestsPage(page, args, alive) {
    const formBox = el('section', { class: 'card', id: 'request-form-box' });
    const filter = el('select', { id: 'request-state' }, el('option', { value: '' }, 'all'),
      REQUEST_STATES.map((st) => el('option', { value: st, selected: st === requestState }, st)));
    const listBox = el('section', { class: 'card', id: 'requests' }, el('p', { class: 'muted' }, 'Loading…'));
    page.replaceChildren(el('h1', null, 'Requests'),
      el('p', { class: 'muted' }, mayDecide()
        ? 'Every request of the cluster. Operators and admins approve or deny those of others; an approved request applies at once and undoes itself at its end.'
        : 'Your requests. An operator or admin approves or denies them; one nobody decides expires.'),
      formBox, listBox);
    // load draws the list, or the API's refusal to give it (a viewer's, say) in its place.
    const load = async () => {
      const q = filter.value ? '?state=' + encodeURIComponent(filter.value) : '';
      try {
        const list = await api('/api/v1/requests' + q);
        if (!alive()) return;
        drawRequests(listBox, filter, list.requests || [], load);
      } catch (e) {
        if (!alive()) return;
        listBox.replaceChildren(requestsHead(filter), el('p', { class: 'error', id: 'requests-error' }, errText(e)));
      }
      ready(page);
    };
    filter.addEventListener('change', () => {
      requestState = filter.value;
      load();
    });
    drawRequestForm(formBox, load);
    await every(15000, async () => {
      // A refresh would throw away a note being written: wait for the next one.
      const editing = listBox.contains(document.activeElement) || [...listBox.querySelectorAll('input')].some((i) => i.value);
      if (!editing) await load();
    });
  }

  function requestsHead(filter) {
    return el('div', { class: 'controls' }, el('h2', null, 'Requests'), el('label', null, 'State', filter));
  }

  function drawRequestForm(box, reload) {
    const kind = el('select', { name: 'kind', id: 'request-kind' }, REQUEST_KINDS.map(([k, label]) => el('option', { value: k }, label + ' (' + k + ')')));
    const inputs = {};
    const rows = REQUEST_FIELDS.map(([name, label, attrs, kinds]) => {
      const input = el('input', Object.assign({ name, id: 'request-' + name.replace('_', '-') }, attrs));
      inputs[name] = input;
      return el('label', { dataset: { kinds: kinds.join(' ') } }, label, input);
    });
    const myTeam = (me && me.teams && me.teams[0]) || '';
    inputs.team.placeholder = myTeam || 'your team';
    inputs.gpu_model.placeholder = '* for any';
    const reason = el('textarea', { name: 'reason', id: 'request-reason', rows: 2, maxLength: 1000, placeholder: 'Why you need it, for whoever decides' });
    const submit = el('button', { type: 'submit', id: 'request-submit' }, 'File request');
    const msg = el('p', { id: 'request-message' });
    const form = el('form', { id: 'request-form', class: 'request-form', noValidate: true },
      el('div', { class: 'controls' }, el('label', null, 'What', kind), rows),
      el('label', { class: 'wide' }, 'Reason', reason), el('div', null, submit), msg);
    const clearMarks = () => form.querySelectorAll('.invalid').forEach((i) => { i.classList.remove('invalid'); i.removeAttribute('aria-invalid'); });
    // The placeholders say what an empty field means for the kind: the API's defaults.
    const showKind = () => {
      for (const r of rows) r.hidden = !r.dataset.kinds.split(' ').includes(kind.value);
      inputs.gpu_model.placeholder = kind.value === 'quota' ? '* for any' : 'any';
      inputs.for_s.placeholder = kind.value === 'quota' ? '168 (7 days)' : '24';
    };
    kind.addEventListener('change', () => {
      showKind();
      clearMarks();
      msg.textContent = '';
    });
    showKind();
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearMarks();
      const fail = (field, text) => {
        msg.className = 'error';
        msg.textContent = field ? field + ': ' + text : text;
        const input = field === 'reason' ? reason : field === 'kind' ? kind : inputs[field];
        if (input && !input.closest('[hidden]')) {
          input.classList.add('invalid');
          input.setAttribute('aria-invalid', 'true');
          input.focus();
        }
      };
      const body = { kind: kind.value, reason: reason.value };
      for (const [name, , , kinds] of REQUEST_FIELDS) {
        const input = inputs[name];
        if (!kinds.includes(kind.value)) continue;
        // An entry the browser cannot read as a number is refused here, naming the field,
        // rather than sent as nothing (which would mean the default).
        if (input.validity.badInput) return fail(name, 'is not a number');
        const v = input.value.trim();
        if (v === '') continue;
        if (attrsType(name) === 'number' && !isFinite(Number(v))) return fail(name, 'is not a number'); // JSON would send null: the default
        if (name === 'for_s') body.for_s = Math.round(Number(v) * 3600);
        else if (attrsType(name) === 'number') body[name] = Number(v);
        else if (attrsType(name) === 'datetime-local') {
          const d = new Date(v);
          if (isNaN(d)) return fail(name, 'is not a time');
          body[name] = d.toISOString();
        } else body[name] = v;
      }
      submit.disabled = true;
      try {
        const req = await api('/api/v1/requests', { method: 'POST', json: body });
        msg.className = 'ok';
        msg.textContent = 'Request ' + req.id + ' filed: ' + describeRequest(req) + '. It waits for a decision until ' + fmtTime(req.expires) + '.';
        reason.value = '';
        reload();
      } catch (e) {
        fail(e.field, e.message);
      } finally {
        submit.disabled = false;
      }
    });
    box.replaceChildren(el('h2', null, 'Ask for something'), form);
  }

  function attrsType(name) { return REQUEST_FIELDS.find(([n]) => n === name)[2].type; }

  // describeRequest says what a request asks for, as the API's Request.Describe does.
  function describeRequest(r) {
    switch (r.kind) {
      case 'quota': return 'raise team ' + r.team + '\'s ' + r.gpu_model + ' limit to ' + r.limit + ' GPUs';
      case 'queue': return 'let ' + r.user + ' submit to queue ' + r.queue;
      case 'reservation': return 'reserve ' + r.gpus + ' GPUs (model ' + (r.gpu_model || 'any') + ') for team ' + r.team;
    }
    return String(r.kind);
  }

  // requestWindow is when the grant runs: asked for a time (quota, queue) until approved,
  // then from the approval; a reservation's own window.
  function requestWindow(r) {
    if (r.start && r.end) return fmtTime(r.start) + ' to ' + fmtTime(r.end);
    return r.for_s ? 'for ' + fmtDur(r.for_s) + ' from approval' : '-';
  }

  function drawRequests(box, filter, reqs, reload) {
    const decider = mayDecide();
    const headers = ['#', 'Kind', 'Asked', 'When', 'By', 'Reason', 'State', 'Decided', 'Expires', 'Outcome'];
    if (decider) headers.push('Decide');
    const sorted = reqs.slice().sort((a, b) => b.id - a.id);
    box.replaceChildren(requestsHead(filter), sorted.length
      ? table(headers, sorted.map((r) => {
        const cells = [String(r.id), r.kind, describeRequest(r), requestWindow(r), r.user + (r.team ? ' (team ' + r.team + ')' : ''),
          el('span', { class: 'reason' }, r.reason || '-'),
          el('span', { class: 'badge req ' + String(r.state).replace(/[^a-z]/g, '') }, r.state),
          r.decided_by ? el('span', { class: 'decision' }, r.decided_by + ', ' + fmtTime(r.decided), r.note ? el('span', { class: 'note' }, ': ' + r.note) : null) : '-',
          r.state === 'pending' ? fmtTime(r.expires) + ' (' + until(r.expires) + ')' : '-',
          el('span', { class: 'outcome' }, r.message || '-')];
        if (decider) cells.push(r.state === 'pending' ? decideControls(r, reload) : '');
        return { attrs: { dataset: { request: String(r.id), state: r.state } }, cells };
      }))
      : el('p', { class: 'notice' }, filter.value ? 'No ' + filter.value + ' request.' : 'No request yet.'));
  }

  // decideControls are an operator's Approve and Deny (with a note, which denying needs)
  // for a pending request; a refusal of the API shows beside them.
  function decideControls(r, reload) {
    const base = '/api/v1/requests/' + encodeURIComponent(r.id);
    const note = el('input', { type: 'text', class: 'note', name: 'note', maxLength: 1000, placeholder: 'note (needed to deny)' });
    const approve = el('button', { type: 'button', class: 'approve' }, 'Approve');
    const deny = el('button', { type: 'button', class: 'danger deny' }, 'Deny');
    const msg = el('div', { class: 'error decide-error' });
    const decide = async (verb) => {
      approve.disabled = deny.disabled = true;
      msg.textContent = '';
      try {
        const n = note.value.trim();
        await api(base + '/' + verb, { method: 'POST', json: n ? { note: n } : {} });
        note.value = '';
        reload();
      } catch (e) {
        msg.textContent = errText(e);
        approve.disabled = deny.disabled = false;
      }
    };
    approve.addEventListener('click', () => decide('approve'));
    deny.addEventListener('click', () => decide('deny'));
    return el('div', { class: 'decide' }, note, el('div', null, approve, ' ', deny), msg);
  }

  // ---- Reports ------------------------------------------------------------------------

  const GROUPINGS = ['team', 'user', 'queue', 'gpu-model', 'node', 'day', 'hour-of-week'];
  let reportBy = 'team';

  async function reportsPage(page, args, alive) {
    const by = el('select', { id: 'report-by' }, GROUPINGS.map((g) => el('option', { value: g, selected: g === reportBy }, g)));
    const sinceIn = el('input', { type: 'date', id: 'report-since' });
    const untilIn = el('input', { type: 'date', id: 'report-until' });
    const load = el('button', { type: 'button', id: 'report-load' }, 'Show');
    const out = el('div', { id: 'report' });
    page.replaceChildren(el('h1', null, 'Reports'),
      el('div', { class: 'controls' }, el('label', null, 'Group by', by), el('label', null, 'Since (UTC)', sinceIn), el('label', null, 'Until (UTC)', untilIn), load,
        el('span', { class: 'muted' }, 'Default: the last 30 days.')),
      out);
    const show = async () => {
      reportBy = by.value;
      const q = new URLSearchParams({ by: by.value });
      if (sinceIn.value) q.set('since', sinceIn.value);
      if (untilIn.value) q.set('until', untilIn.value);
      out.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
      try {
        const rep = await api('/api/v1/usage?' + q);
        if (!alive()) return;
        drawReport(out, rep);
      } catch (e) {
        if (!alive()) return;
        out.replaceChildren(el('p', { class: 'notice', id: 'report-unavailable' }, 'Usage reports are not available: ' + e.message));
      }
      ready(page);
    };
    load.addEventListener('click', show);
    by.addEventListener('change', show);
    await show();
  }

  const REPORT_COLUMNS = [
    ['key', 'Group', (r) => r.key],
    ['jobs', 'Jobs', (r) => r.jobs],
    ['attempts', 'Attempts', (r) => r.attempts],
    ['gpu_hours', 'GPU-h allocated', (r) => num(r.gpu_hours, 2)],
    ['effective_gpu_hours', 'GPU-h effective', (r) => (r.utilization_pct === undefined || r.utilization_pct === null ? 'unknown' : num(r.effective_gpu_hours, 2))],
    ['utilization_pct', 'Utilisation', (r) => pct(r.utilization_pct)],
    ['idle_gpu_hours', 'GPU-h idle', (r) => num(r.idle_gpu_hours, 2)],
    ['success_rate', 'Success', (r) => (r.success_rate === undefined || r.success_rate === null ? '-' : pct(r.success_rate * 100))],
    ['failed', 'Failed', (r) => r.failed],
    ['wait_p50_s', 'Wait p50', (r) => fmtDur(r.wait_p50_s)],
    ['wait_p95_s', 'Wait p95', (r) => fmtDur(r.wait_p95_s)],
    ['preemptions', 'Preempted', (r) => r.preemptions],
    ['preemption_waste_gpu_hours', 'GPU-h wasted', (r) => num(r.preemption_waste_gpu_hours, 2)],
    ['cost', 'Cost', (r) => (r.cost === undefined || r.cost === null ? '-' : num(r.cost, 2))],
  ];

  function drawReport(out, rep) {
    const rows = rep.rows || [];
    const headers = REPORT_COLUMNS.map(([, label], i) => (i ? { label: label + (label === 'Cost' && rep.currency ? ' (' + rep.currency + ')' : ''), num: true } : label));
    const trs = rows.map((r) => ({ cells: REPORT_COLUMNS.map(([, , f]) => String(f(r))) }));
    if (rep.total) trs.push({ attrs: { class: 'total' }, cells: REPORT_COLUMNS.map(([, , f], i) => (i ? String(f(rep.total)) : 'total')) });
    const csv = el('button', { type: 'button', id: 'report-csv' }, 'Download CSV');
    csv.addEventListener('click', () => downloadCSV(rep));
    out.replaceChildren(
      el('p', { class: 'muted' }, 'GPU usage by ' + rep.by + ' from ' + fmtTime(rep.since) + ' to ' + fmtTime(rep.until) + '.'),
      el('section', { class: 'card' }, el('h2', null, 'GPU-hours by ' + rep.by),
        barChart(rows.map((r) => ({ label: r.key, values: [r.gpu_hours, r.effective_gpu_hours] })), { names: ['allocated', 'effective'], width: 1100, label: 'GPU-hours by ' + rep.by })),
      el('section', { class: 'card' }, el('h2', null, 'Table'), table(headers, trs), el('p', null, csv)),
      rep.notes && rep.notes.length ? el('section', { class: 'card' }, el('h2', null, 'Notes'), el('ul', null, rep.notes.map((n) => el('li', null, n)))) : null);
  }

  // downloadCSV writes the report's rows and total as CSV, built here from the JSON.
  function downloadCSV(rep) {
    const cols = ['key', 'jobs', 'attempts', 'gpu_hours', 'effective_gpu_hours', 'measured_gpu_hours', 'utilization_pct', 'idle_gpu_hours', 'succeeded', 'failed',
      'success_rate', 'wait_p50_s', 'wait_p95_s', 'preemptions', 'preemption_waste_gpu_hours', 'capacity_gpu_hours', 'idle_capacity_gpu_hours', 'cost'];
    const cell = (v) => {
      if (v === null || v === undefined) return '';
      let s = String(v);
      // A leading =, +, - or @ would be a formula to a spreadsheet.
      if (/^[=+\-@]/.test(s) && isNaN(Number(s))) s = "'" + s;
      return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    };
    const lines = [cols.join(',')];
    for (const r of (rep.rows || []).concat(rep.total ? [Object.assign({}, rep.total, { key: 'total' })] : [])) lines.push(cols.map((c) => cell(r[c])).join(','));
    const blob = new Blob([lines.join('\r\n') + '\r\n'], { type: 'text/csv' });
    const a = el('a', { href: URL.createObjectURL(blob), download: 'rota-usage-' + rep.by + '.csv' });
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }

  document.getElementById('logout').addEventListener('click', logout);
  window.addEventListener('hashchange', () => {
    if (location.hash.startsWith('#login=')) start();
    else if (me) route();
  });
  start();
})();
