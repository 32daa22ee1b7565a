// The search console (served at /ui by `cellar serve`): one query to POST /v1/search with the
// API key of the key field (kept in localStorage, sent as `Authorization: Bearer KEY`), its hits
// with each stage's score, its timing breakdown as a stacked bar, and a live chart of QPS and P95
// computed from /metrics every 2 s. URL parameters fill the form (q, mode, k, filter) and
// run=1 runs it on load. No framework, nothing fetched from anywhere but this server.
'use strict';

const KEY_STORE = 'cellar.apiKey';
const POLL_MS = 2000;
const POINTS = 60; // samples the chart keeps: two minutes

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmtMs(ms) {
  return ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2);
}

function fmtScore(x) {
  return x === null || x === undefined ? '—' : Number(x).toFixed(3);
}

function fmtBytes(n) {
  return n >= 1 << 20 ? (n / (1 << 20)).toFixed(1) + ' MiB' : n >= 1024 ? (n / 1024).toFixed(0) + ' KiB' : n + ' B';
}

// ---- the key and errors

function keyHeaders() {
  const key = $('api-key').value.trim();
  return key ? { Authorization: 'Bearer ' + key } : {};
}

function showError(message, status, code) {
  const box = $('message');
  box.replaceChildren();
  if (code) box.append(el('span', 'code', status ? `${status} ${code}` : code));
  box.append(document.createTextNode(message));
  box.dataset.status = status || '';
  box.hidden = false;
}

function clearError() {
  $('message').hidden = true;
  $('message').replaceChildren();
}

// An error answer's message: its JSON `message` ({code, message, details}), else its text.
async function failure(response) {
  const text = await response.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch (_) {
    /* not JSON: the text itself */
  }
  const code = body && body.code ? body.code : '';
  let message = body && body.message ? body.message : text || response.statusText;
  if (response.status === 401) {
    message = `The server needs an API key (${message}): enter it in the API key field at the top right and search again.`;
  }
  return { message, code: code || 'error', status: response.status };
}

async function getJson(path) {
  const response = await fetch(path, { headers: keyHeaders() });
  if (!response.ok) {
    const e = await failure(response);
    throw Object.assign(new Error(`${path}: ${e.message}`), e);
  }
  return response.json();
}

// ---- the form

// The modes the server accepts, from its OpenAPI document (`Mode`: an enum or a oneOf of consts).
function modesOf(doc) {
  const mode = doc.components.schemas.Mode;
  return mode.enum || mode.oneOf.map((m) => m.const);
}

async function loadServer() {
  const [health, doc] = await Promise.all([getJson('/healthz'), getJson('/openapi.json')]);
  const select = $('mode');
  for (const name of modesOf(doc)) select.append(new Option(name, name));
  const facts = [];
  if (health.docs !== null && health.docs !== undefined) facts.push(`${health.docs.toLocaleString()} documents`);
  if (health.model) facts.push(health.model);
  facts.push(`v${health.version}`);
  $('server-facts').textContent = facts.join(' · ');
}

function fillFromUrl() {
  const params = new URLSearchParams(location.search);
  if (params.has('q')) $('q').value = params.get('q');
  if (params.has('k')) $('k').value = params.get('k');
  if (params.has('filter')) {
    $('filter').value = params.get('filter');
    $('filter-box').open = true;
  }
  if (params.has('mode')) {
    const mode = params.get('mode');
    if (![...$('mode').options].some((o) => o.value === mode)) $('mode').append(new Option(mode, mode));
    $('mode').value = mode; // an unknown one is sent as given: the server names the modes it takes
  }
  return params.get('run') === '1';
}

// The request of the form, or an Error naming what is wrong.
function request() {
  const body = { query: $('q').value };
  if ($('mode').value) body.mode = $('mode').value;
  const k = $('k').value.trim();
  if (k) body.k = Number(k);
  const filter = $('filter').value.trim();
  if (filter) {
    try {
      body.filter = JSON.parse(filter);
    } catch (e) {
      throw new Error(`The filter is not JSON: ${e.message}`);
    }
  }
  return body;
}

// The form's query in the address bar (never the key), so a search can be linked.
function remember(body) {
  const params = new URLSearchParams({ q: body.query });
  if (body.mode) params.set('mode', body.mode);
  if ($('k').value.trim()) params.set('k', $('k').value.trim());
  if ($('filter').value.trim()) params.set('filter', $('filter').value.trim());
  params.set('run', '1');
  history.replaceState(null, '', `${location.pathname}?${params}`);
}

async function search() {
  clearError();
  let body;
  try {
    body = request();
  } catch (e) {
    showError(e.message, 0, 'invalid_filter');
    return;
  }
  remember(body);
  const button = $('query-form').querySelector('button');
  button.disabled = true;
  try {
    const response = await fetch('/v1/search', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...keyHeaders() },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      const e = await failure(response);
      $('results').hidden = $('timing').hidden = true;
      showError(e.message, e.status, e.code);
      return;
    }
    const answer = await response.json();
    renderTimings(answer);
    renderHits(answer);
  } catch (e) {
    showError(`No answer from the server: ${e.message}`, 0, 'network');
  } finally {
    button.disabled = false;
  }
}

// ---- one answer

// The bar's segments from the response's `timings` (ms). `read` is the read on the query's path;
// `read_hidden` overlapped the encoding or earlier scoring, so the bar is longer than the
// wall time by it; `other` is what the total holds beyond the stages (planning, the filter).
const SEGMENTS = [
  ['queue', 'queue', (t) => t.queue_ms],
  ['encode', 'encode', (t) => t.encode_ms],
  ['first_stage', 'first stage', (t) => t.first_stage_ms],
  ['read', 'read', (t) => Math.max(0, t.read_ms - t.read_hidden_ms)],
  ['read_hidden', 'hidden read (overlapped)', (t) => t.read_hidden_ms],
  ['maxsim', 'MaxSim', (t) => t.maxsim_ms],
  ['fuse', 'fuse', (t) => t.fuse_ms],
  ['text', 'text', (t) => t.text_ms],
];

function renderTimings(answer) {
  const t = answer.timings;
  const parts = SEGMENTS.map(([stage, label, ms]) => [stage, label, ms(t) || 0]);
  const onPath = parts.filter(([stage]) => stage !== 'queue' && stage !== 'read_hidden').reduce((s, p) => s + p[2], 0);
  parts.push(['other', 'other', Math.max(0, t.total_ms - onPath)]);
  const bar = $('timing-bar');
  const legend = $('timing-legend');
  bar.replaceChildren();
  legend.replaceChildren();
  const sum = parts.reduce((s, p) => s + p[2], 0);
  for (const [stage, label, ms] of parts) {
    const item = el('li', `stage-${stage}`);
    item.append(el('span', `swatch sw-${stage}`), `${label} ${fmtMs(ms)} ms`);
    legend.append(item);
    if (ms < 0.005) continue;
    // Labelled where it is wide enough; each has its title, and the legend below.
    const seg = el('div', `seg seg-${stage}`, ms / sum >= 0.08 ? label.replace(/ \(.*\)$/, '') : '');
    seg.dataset.stage = stage;
    seg.dataset.ms = ms.toFixed(3);
    seg.title = `${label}: ${fmtMs(ms)} ms`;
    seg.style.flex = `${ms} 0 0px`;
    bar.append(seg);
  }
  $('timing-total').textContent = `${fmtMs(t.total_ms)} ms searching, ${fmtMs(t.queue_ms)} ms queued`;
  const facts = [`mode ${answer.params.mode}`, `${answer.candidates} candidates`, `${answer.reranked} re-ranked`];
  facts.push(`${answer.io.read_calls} reads, ${fmtBytes(answer.io.bytes_read)}`);
  if (answer.filter) facts.push(`filter matched ${answer.filter.matched}${answer.filter.exact ? ' (ranked exactly)' : ''}`);
  $('search-facts').textContent = facts.join(' · ');
  $('timing').hidden = false;
}

// What a hit's `first_stage_score` is in this search's mode.
function firstStageName(params) {
  const mode = params.mode;
  if (mode === 'dense-exact' || mode === 'ivf') return 'pooled';
  if (mode === 'dense') return params.tokens ? 'token stage' : 'IVF';
  const lexical = { bm25: 'BM25', splade: 'SPLADE', both: 'BM25+SPLADE' }[params.lexical] || params.lexical;
  const dense = (params.tokens && params.tokens.hybrid_candidates > 0) || (params.ivf && params.ivf.hybrid_candidates > 0);
  return mode === 'hybrid' && dense ? `${lexical} + dense (z)` : lexical;
}

function renderHits(answer) {
  $('first-stage-name').textContent = firstStageName(answer.params);
  const rows = $('hits').tBodies[0];
  rows.replaceChildren();
  answer.hits.forEach((hit, i) => {
    const row = el('tr', 'hit');
    row.dataset.id = hit.id;
    row.append(el('td', 'rank num', String(i + 1)));
    const doc = el('td', 'doc');
    const head = el('div');
    head.append(el('span', 'hit-id', hit.id));
    if (hit.title) head.append(el('span', 'hit-title', hit.title));
    doc.append(head);
    if (hit.text) doc.append(el('div', 'hit-text', hit.text.length > 600 ? hit.text.slice(0, 600) + '…' : hit.text));
    if (hit.metadata && Object.keys(hit.metadata).length) doc.append(el('div', 'hit-meta', JSON.stringify(hit.metadata)));
    row.append(doc);
    row.append(el('td', 'num score-first', fmtScore(hit.first_stage_score)));
    row.append(el('td', 'num score-maxsim', fmtScore(hit.maxsim)));
    const fused = el('td', 'num score-fused');
    if (hit.stage === 'reranked') fused.textContent = fmtScore(hit.score);
    else fused.append(el('span', 'first-stage-only', 'first stage'));
    fused.title = hit.stage === 'reranked' ? 'the fused score it is ranked by' : 'not re-ranked: ranked by its first-stage score';
    row.append(fused);
    rows.append(row);
  });
  if (!answer.hits.length) {
    const row = el('tr', 'none');
    const cell = el('td', 'muted', 'No document matched.');
    cell.colSpan = 5;
    row.append(cell);
    rows.append(row);
  }
  $('results').hidden = false;
}

// ---- the live chart

// From the Prometheus text: /v1 requests counted (`cellar_requests_total`) and the request
// latency histogram's cumulative buckets (`cellar_stage_seconds{stage="request"}`), [le, count].
function parseMetrics(text) {
  let requests = 0;
  const buckets = [];
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const [, name, value] of (m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[name] = value;
    if (m[1] === 'cellar_requests_total' && (labels.endpoint || '').startsWith('/v1/')) requests += Number(m[3]);
    if (m[1] === 'cellar_stage_seconds_bucket' && labels.stage === 'request') {
      buckets.push([labels.le === '+Inf' ? Infinity : Number(labels.le), Number(m[3])]);
    }
  }
  return { requests, buckets };
}

// The q-quantile in ms of the requests between two readings of a cumulative histogram,
// interpolated within its bucket as Prometheus' histogram_quantile does; null without requests.
function quantileMs(q, now, before) {
  const counts = now.map(([le, c], i) => [le, c - before[i][1]]);
  const total = counts.length ? counts[counts.length - 1][1] : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let [lowLe, lowCount] = [0, 0];
  for (const [le, count] of counts) {
    if (count >= rank) {
      if (le === Infinity) return lowLe * 1e3; // past the largest bound: that bound
      return (lowLe + ((le - lowLe) * (rank - lowCount)) / Math.max(count - lowCount, 1e-9)) * 1e3;
    }
    [lowLe, lowCount] = [le, count];
  }
  return null;
}

const samples = [];
let previous = null;

async function poll() {
  let text;
  try {
    const response = await fetch('/metrics');
    if (!response.ok) throw new Error((await failure(response)).message);
    text = await response.text();
  } catch (e) {
    $('live-now').textContent = `/metrics unavailable: ${e.message}`;
    return;
  }
  const reading = { at: performance.now() / 1e3, ...parseMetrics(text) };
  const reset = previous && (reading.requests < previous.requests || reading.buckets.length !== previous.buckets.length);
  if (previous && !reset) {
    const seconds = Math.max(reading.at - previous.at, 1e-3);
    const qps = (reading.requests - previous.requests) / seconds;
    samples.push({ qps, p95: quantileMs(0.95, reading.buckets, previous.buckets) });
    if (samples.length > POINTS) samples.shift();
    const last = samples[samples.length - 1];
    $('live-now').textContent = `QPS ${last.qps.toFixed(1)} · P95 ${last.p95 === null ? '— (no requests)' : fmtMs(last.p95) + ' ms'}`;
    drawChart();
  }
  previous = reading;
}

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// Rounds up to 1, 2 or 5 times a power of ten.
function niceMax(x) {
  const power = 10 ** Math.floor(Math.log10(Math.max(x, 1e-9)));
  return [1, 2, 5, 10].map((m) => m * power).find((v) => v >= x);
}

function drawChart() {
  const [width, height, left, right, top, bottom] = [600, 140, 44, 52, 8, 18];
  const chart = $('chart');
  chart.replaceChildren();
  const qpsMax = niceMax(Math.max(1, ...samples.map((s) => s.qps)));
  const p95Max = niceMax(Math.max(1, ...samples.map((s) => s.p95 || 0)));
  const x = (i) => left + ((width - left - right) * i) / (POINTS - 1);
  const y = (v, max) => top + (height - top - bottom) * (1 - v / max);
  for (const f of [0, 0.5, 1]) {
    const yy = y(f, 1);
    chart.append(svg('line', { class: 'grid', x1: left, x2: width - right, y1: yy, y2: yy }));
    chart.append(svg('text', { class: 'axis', x: left - 4, y: yy + 3, 'text-anchor': 'end' }, `${+(qpsMax * f).toPrecision(3)}/s`));
    chart.append(svg('text', { class: 'axis', x: width - right + 4, y: yy + 3 }, `${+(p95Max * f).toPrecision(3)} ms`));
  }
  chart.append(svg('text', { class: 'axis', x: left, y: height - 4 }, `−${(POINTS * POLL_MS) / 1e3} s`));
  chart.append(svg('text', { class: 'axis', x: width - right, y: height - 4, 'text-anchor': 'end' }, 'now'));
  const offset = POINTS - samples.length;
  const line = (value, max) => {
    let d = '';
    let pen = 'M';
    samples.forEach((s, i) => {
      const v = value(s);
      if (v === null) {
        pen = 'M'; // no requests in that interval: a gap, not a zero
        return;
      }
      d += `${pen}${x(offset + i).toFixed(1)},${y(v, max).toFixed(1)} `;
      pen = 'L';
    });
    return d.trim();
  };
  const series = [
    ['qps', (s) => s.qps, qpsMax],
    ['p95', (s) => s.p95, p95Max],
  ];
  for (const [name, value, max] of series) {
    chart.append(svg('path', { class: name, d: line(value, max) || 'M0,0' }));
    const last = samples.map(value).findLastIndex((v) => v !== null);
    if (last >= 0) {
      const at = { cx: x(offset + last).toFixed(1), cy: y(value(samples[last]), max).toFixed(1), r: 3 };
      chart.append(svg('circle', { class: `${name} dot`, ...at }));
    }
  }
}

// ---- start

async function start() {
  const key = $('api-key');
  key.value = localStorage.getItem(KEY_STORE) || '';
  key.addEventListener('input', () => localStorage.setItem(KEY_STORE, key.value.trim()));
  $('query-form').addEventListener('submit', (event) => {
    event.preventDefault();
    search();
  });
  poll();
  setInterval(poll, POLL_MS);
  try {
    await loadServer();
  } catch (e) {
    showError(e.message, e.status, e.code || 'unavailable');
  }
  if (fillFromUrl()) await search();
}

start();
