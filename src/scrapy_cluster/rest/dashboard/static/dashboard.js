// scrapy-cluster dashboard: renders the snapshots pushed on BASE/events and acts through the
// same API as every client (POST /feed, POST /poll). Plain DOM, no framework; data only ever
// reaches the page through textContent, never as HTML.
"use strict";

const BASE = document.body.dataset.base;
const API_ROOT = BASE.replace(/\/ui$/, "");
const STALE_MS = 5000;
const APPID = "dashboard";
const state = {
  overview: null, receivedAt: 0, chart: null, chartKey: "",
  domains: { page: 1, size: 25, spider: "" }, crawls: { page: 1, size: 25 },
  confirming: null, stopping: new Set(), funnelOf: null,
};

// --- small helpers --------------------------------------------------------------------------
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
const $ = (selector) => document.querySelector(selector);
const dash = "—";
const num = (value, digits = 0) => (value === null || value === undefined) ? dash :
  Number(value).toLocaleString(undefined, { maximumFractionDigits: digits });
function duration(seconds) {
  if (seconds === null || seconds === undefined) return dash;
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}
function bytes(value) {
  if (value === null || value === undefined) return dash;
  const units = ["B", "KiB", "MiB", "GiB"];
  let index = 0;
  while (value >= 1024 && index < units.length - 1) { value /= 1024; index += 1; }
  return `${value.toFixed(index ? 1 : 0)} ${units[index]}`;
}
const when = (epochMs) => new Date(epochMs).toLocaleString();
function fillBody(table, rows) {
  const body = $(`${table} tbody`);
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", {}, el("td", { class: "muted", colspan: "9" }, "none")));
}
function message(text, isError) {
  const item = el("div", { class: isError ? "message error" : "message" }, text);
  $("#messages").append(item);
  setTimeout(() => item.remove(), 15000);
}
function newUuid() {
  const bytesOut = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytesOut, (b) => b.toString(16).padStart(2, "0")).join("");
}

// --- the API ----------------------------------------------------------------------------------
async function getJson(path) {
  const response = await fetch(BASE + path, { credentials: "same-origin" });
  const body = await response.json();
  if (body.status !== "SUCCESS") throw new Error(body.error ? body.error.message : response.status);
  return body.data;
}
async function postApi(path, payload) {
  const response = await fetch(API_ROOT + path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify(payload),
  });
  let body;
  try { body = await response.json(); } catch (error) { body = null; }
  if (!body || body.status !== "SUCCESS") {
    const error = body && body.error ? body.error : { message: `HTTP ${response.status}` };
    throw new Error(error.cause ? `${error.message} ${error.cause}` : error.message);
  }
  return body.data;
}
// POST /feed; an answer that was not ready in time is fetched from /poll (bounded).
async function feed(payload) {
  const data = await postApi("/feed", payload);
  if (!data || !data.poll_id) return data;
  for (let attempt = 0; attempt < 30; attempt += 1) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    try { return await postApi("/poll", { poll_id: data.poll_id }); } catch (error) { /* not yet */ }
  }
  throw new Error(`no answer yet to request ${data.poll_id}`);
}

// --- sections ---------------------------------------------------------------------------------
function renderSummary(summary) {
  const cards = [["backlog", num(summary.backlog)], ["in flight", num(summary.in_flight)],
    ["responses/s", num(summary.rate_rps, 2)], ["domains", num(summary.domains)],
    ["active crawls", num(summary.crawls)], ["nodes alive", num(summary.nodes_alive)],
    ["nodes offline", num(summary.nodes_offline)], ["nodes stopped", num(summary.nodes_stopped)],
    ["paused", num(summary.paused)], ["halted", num(summary.halted)],
    ["refused", reasonTotal(summary.refused), reasonText(summary.refused)],
    ["filtered", reasonTotal(summary.filtered), reasonText(summary.filtered)]];
  if (summary.scheduled || summary.overdue_crawls) {
    cards.push(["re-crawl URLs", num(summary.scheduled)]);
    cards.push(["oldest overdue", summary.oldest_overdue_s > 0 ? duration(summary.oldest_overdue_s) : "none",
      `${num(summary.overdue_crawls)} crawl(s) with URLs past their due time`]);
  }
  const unserved = Object.entries(summary.unserved || {});
  if (unserved.length) {
    cards.push(["no crawler for", num(unserved.length), unserved.map(([spider, queued]) =>
      `${spider} (${num(queued)} queued)`).join(", ")]);
  }
  $("#summary").replaceChildren(...cards.map(([label, value, detail]) =>
    el("div", { class: "card", title: detail || "" }, el("b", {}, value), label,
      detail ? el("small", { class: "detail" }, detail) : null)));
}

// {reason: n} -> "ssrf 2, robots 1" (the server sends the largest first)
function reasonText(counts) {
  return Object.entries(counts || {}).map(([reason, n]) => `${reason} ${num(n)}`).join(", ");
}

function reasonTotal(counts) {
  return num(Object.values(counts || {}).reduce((sum, n) => sum + n, 0));
}

function renderNodes(nodes) {
  fillBody("#nodes", nodes.map((node) => {
    const status = node.alive ? "alive" : (node.stopped ? "stopped" : "offline");
    return el("tr", { dataset: { component: node.component, member: node.member } },
      el("td", {}, node.component), el("td", {}, node.member),
      el("td", { class: `state-${status}` }, status), el("td", {}, node.version || dash),
      el("td", {}, node.engine || dash),
      el("td", {}, node.spiders && node.spiders.length ? node.spiders.join(", ") : dash),
      el("td", { class: "num" }, node.cpu_percent === null ? dash : `${num(node.cpu_percent, 1)} %`),
      el("td", { class: "num" }, bytes(node.rss_bytes)),
      el("td", {}, `${duration(node.age_s)} ago`));
  }));
}

function renderChart(throughput) {
  const scope = $("#chart-scope");
  const hosts = Object.keys(throughput.per_node);
  const known = Array.from(scope.options).slice(1).map((option) => option.value);
  if (known.join("\n") !== hosts.join("\n")) {
    const chosen = scope.value;
    scope.replaceChildren(el("option", { value: "" }, "cluster"),
      ...hosts.map((host) => el("option", { value: host }, host)));
    scope.value = hosts.includes(chosen) ? chosen : "";
  }
  const series = scope.value ? throughput.per_node[scope.value] || {} : throughput.statuses;
  const statuses = Object.keys(series);
  const data = [throughput.times_s, ...statuses.map((status) => series[status])];
  const key = `${scope.value}|${statuses.join(",")}`;
  const container = $("#chart");
  container.dataset.points = String(statuses.reduce(
    (total, status) => total + series[status].reduce((a, b) => a + b, 0), 0));
  if (state.chart && state.chartKey === key) { state.chart.setData(data); return; }
  if (state.chart) state.chart.destroy();
  const palette = ["#2b6cb0", "#c53030", "#2f855a", "#b7791f", "#6b46c1", "#2c7a7b", "#97266d"];
  state.chart = new uPlot({
    width: Math.max(320, container.clientWidth || 900), height: 260,
    scales: { x: { time: true } },
    series: [{}, ...statuses.map((status, index) => ({
      label: `status ${status}`, stroke: palette[index % palette.length], width: 2 }))],
    axes: [{}, { label: `responses / ${Math.round(throughput.bucket_s)} s` }],
  }, data, container);
  state.chartKey = key;
}

function countRows(counts, label) {
  return Object.entries(counts).map(([name, count]) =>
    el("tr", {}, el("td", {}, label ? label(name) : name), el("td", { class: "num" }, num(count))));
}
function statusName(code) { return code === "0" ? "0 (no response)" : code; }
function pills(statuses) {
  return el("span", {}, ...Object.entries(statuses).map(([code, count]) =>
    el("span", { class: "pill" }, `${code}×${count}`)));
}
function renderErrors(errors) {
  $("#errors-window").textContent = `(last ${duration(errors.window_s)})`;
  $("#exceptions-window").textContent = `(last ${duration(errors.exceptions_window_s)})`;
  fillBody("#errors-status", countRows(errors.by_status, statusName));
  fillBody("#errors-exception", countRows(errors.by_exception));
  fillBody("#errors-domain", errors.by_domain.map((row) => el("tr", {},
    el("td", {}, row.domain), el("td", { class: "num" }, num(row.errors)),
    el("td", { class: "num" }, num(row.responses)), el("td", {}, pills(row.statuses)))));
}

function renderConfig(config) {
  fillBody("#throttles", config.throttles.map((row) => el("tr", {},
    el("td", {}, row.domain), el("td", { class: "num" }, num(row.hits)),
    el("td", { class: "num" }, num(row.window, 2)), el("td", { class: "num" }, num(row.scale, 2)))));
  const blacklist = config.blacklist.map((domain) => el("li", {}, domain));
  $("#blacklist").replaceChildren(...(blacklist.length ? blacklist : [el("li", { class: "muted" }, "none")]));
  fillBody("#paused", config.paused.filter((row) => row.state !== "active").map((row) => el("tr", {},
    el("td", {}, row.domain), el("td", { class: `state-${row.state}` }, row.state),
    el("td", {}, row.paused_until_ms ? when(row.paused_until_ms) : dash),
    el("td", {}, row.reason || dash),
    el("td", {}, el("button", { type: "button", onclick: () => domainAction("domain-resume", { domain: row.domain }) }, "Resume")))));
}

const WHY = { throttle_bound: "throttle-bound", worker_bound: "worker-bound",
  no_crawler: "no crawler for this spider",
  out_of_work: "out of work", paused: "paused", halted: "halted", blacklisted: "blacklisted" };
function lastError(error) {
  if (!error) return dash;
  const parts = [error.status !== undefined && error.status !== null ? `status ${error.status}` : null,
    error.error, error.url, error.at_ms ? when(error.at_ms) : null].filter(Boolean);
  return parts.join(" · ");
}
function renderDomains(page) {
  const limitText = (row) => row.limit.rate_rps === null ? "unlimited" : num(row.limit.rate_rps, 2);
  fillBody("#domains", page.rows.map((row) => el("tr", { dataset: { domain: row.domain } },
    el("td", {}, row.domain), el("td", { class: "num" }, num(row.backlog)),
    el("td", { class: "num" }, num(row.in_flight)),
    el("td", { class: "num" }, `${num(row.rate_rps, 2)} / ${limitText(row)}`),
    el("td", {}, pills(row.statuses)), el("td", { class: "last-error" }, lastError(row.last_error)),
    el("td", { class: `state-${row.state}` }, row.state === "paused" && row.paused_until_ms ?
      `paused until ${when(row.paused_until_ms)}` : row.state),
    el("td", { class: `why why-${row.bottleneck}` }, WHY[row.bottleneck] || row.bottleneck),
    el("td", { class: "num" }, row.drain_s === null ? dash : duration(row.drain_s)))));
  pagerLabel("#domains-pager", page);
}

function crawlKey(row) { return `${row.spiderid}\n${row.appid}\n${row.crawlid}`; }
function crawlActions(row) {
  const key = crawlKey(row);
  if (state.stopping.has(key)) return el("td", { class: "muted" }, "stopping…");
  const funnel = el("button", { type: "button", class: "funnel", onclick: () => showFunnel(row) }, "Funnel");
  if (!row.appid) return el("td", {}, funnel);
  if (state.confirming === key) {
    return el("td", {}, `Stop ${row.crawlid}? `,
      el("button", { type: "button", class: "danger confirm-stop", onclick: () => stopCrawl(row) }, "Yes, stop"),
      " ", el("button", { type: "button", class: "cancel-stop", onclick: () => { state.confirming = null; refreshCrawls(); } }, "Cancel"));
  }
  return el("td", {}, funnel, " ",
    el("button", { type: "button", class: "stop", onclick: () => { state.confirming = key; refreshCrawls(); } }, "Stop"));
}
function renderCrawls(page) {
  fillBody("#crawls", page.rows.map((row) => el("tr", { dataset: { crawlid: row.crawlid, spiderid: row.spiderid } },
    el("td", {}, row.spiderid), el("td", {}, row.appid || dash), el("td", {}, row.crawlid),
    el("td", { class: "num pending" }, num(row.pending)), el("td", { class: "num" }, num(row.in_flight)),
    el("td", { class: "num" }, num(row.domains)),
    el("td", { class: "num" }, row.scheduled ? num(row.scheduled) : dash),
    el("td", { class: row.oldest_overdue_s > 0 ? "num overdue" : "num" },
      row.oldest_overdue_s > 0 ? duration(row.oldest_overdue_s) : dash),
    el("td", { class: "num" }, row.not_modified_share === null || row.not_modified_share === undefined
      ? dash : `${num(row.not_modified_share * 100, 1)} %`),
    el("td", {}, row.expires_s ? when(row.expires_s * 1000) : "never"), crawlActions(row))));
  pagerLabel("#crawls-pager", page);
}

const STAGES = ["submitted", "queued", "deduplicated", "filtered", "fetched", "retried", "dropped", "delivered"];
function stageText(name, value) {
  if (typeof value === "number") return `${name} ${num(value)}`;
  const total = Object.values(value).reduce((a, b) => a + b, 0);
  const detail = Object.entries(value).map(([key, count]) => `${key} ${num(count)}`).join(", ");
  return `${name} ${num(total)} (${detail})`;
}
async function showFunnel(row) {
  state.funnelOf = row;
  try {
    const data = await getJson(`/api/crawl/${encodeURIComponent(row.spiderid)}/${encodeURIComponent(row.crawlid)}`);
    const names = [...STAGES, ...Object.keys(data.funnel).filter((name) => !STAGES.includes(name))];
    const stages = names.filter((name) => name in data.funnel).map((name) =>
      el("li", { dataset: { stage: name } }, stageText(name, data.funnel[name])));
    const recrawl = data.scheduled ? `, re-crawl ${num(data.scheduled)} scheduled` +
      (data.not_modified_share === null ? "" : `, ${num(data.not_modified_share * 100, 1)} % unchanged`) : "";
    $("#funnel-crawl").textContent = `${row.crawlid} (pending ${num(data.pending)}, in flight ${num(data.in_flight)}${recrawl})`;
    $("#funnel-stages").replaceChildren(...(stages.length ? stages : [el("li", {}, "nothing counted yet")]));
    $("#funnel").hidden = false;
  } catch (error) { message(`funnel: ${error.message}`, true); }
}

// --- paging -------------------------------------------------------------------------------------
function pagerLabel(selector, page) {
  const pages = Math.max(1, Math.ceil(page.total / page.size));
  $(`${selector} .page-label`).textContent = `page ${page.page} of ${pages} (${num(page.total)} rows)`;
}
async function refreshDomains() {
  const query = new URLSearchParams({ page: state.domains.page, size: state.domains.size });
  if (state.domains.spider) query.set("spider", state.domains.spider);
  try { renderDomains(await getJson(`/api/domains?${query}`)); } catch (error) { /* shown by the badge */ }
}
async function refreshCrawls() {
  const query = new URLSearchParams({ page: state.crawls.page, size: state.crawls.size });
  try { renderCrawls(await getJson(`/api/crawls?${query}`)); } catch (error) { /* shown by the badge */ }
}
function wirePager(selector, section, refresh) {
  $(selector).addEventListener("click", (event) => {
    const step = Number(event.target.dataset.step || 0);
    if (!step) return;
    state[section].page = Math.max(1, state[section].page + step);
    refresh();
  });
}

// --- actions ------------------------------------------------------------------------------------
async function stopCrawl(row) {
  const key = crawlKey(row);
  state.confirming = null;
  state.stopping.add(key);
  refreshCrawls();
  try {
    const answer = await feed({ action: "stop", appid: row.appid, spiderid: row.spiderid,
      crawlid: row.crawlid, uuid: newUuid() });
    message(`crawl ${row.crawlid} stopped: ${num(answer.total_purged)} queued requests removed`);
  } catch (error) {
    message(`stop ${row.crawlid}: ${error.message}`, true);
  } finally {
    setTimeout(() => { state.stopping.delete(key); refreshCrawls(); }, 3000);
  }
}
async function domainAction(action, fields) {
  try {
    const answer = await feed({ appid: APPID, uuid: newUuid(), action, ...fields });
    message(`${action} ${fields.domain}: ${answer && answer.result ? answer.result : "done"}`);
  } catch (error) { message(`${action} ${fields.domain}: ${error.message}`, true); }
}
function crawlRequest(form) {  // buildCrawlRequest: crawl_form.js
  const raw = form.raw.value.trim();
  if (raw) return JSON.parse(raw);
  const values = {};
  for (const input of form.elements) {
    if (input.name) values[input.name] = input.type === "checkbox" ? input.checked : input.value;
  }
  return buildCrawlRequest(values, Date.now() / 1000, newUuid);
}
function wireForms() {
  $("#crawl-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    let request;
    try { request = crawlRequest(event.target); } catch (error) { message(`crawl not sent: ${error.message}`, true); return; }
    try {
      await feed(request);
      message(`crawl ${request.crawlid} submitted`);
      event.target.crawlid.value = "";
    } catch (error) { message(`crawl not accepted: ${error.message}`, true); }
  });
  $("#throttle-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    const action = event.submitter ? event.submitter.value : "domain-update";
    const fields = { domain: form.domain.value.trim() };
    if (action === "domain-update") {
      Object.assign(fields, { hits: Number(form.hits.value), window: Number(form.window.value),
        scale: Number(form.scale.value || 1) });
    }
    domainAction(action, fields);
  });
  $("#domain-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const action = event.submitter ? event.submitter.value : "domain-resume";
    domainAction(action, { domain: event.target.domain.value.trim() });
  });
  $("#domains-spider").addEventListener("change", (event) => {
    state.domains.spider = event.target.value.trim();
    state.domains.page = 1;
    refreshDomains();
  });
  $("#chart-scope").addEventListener("change", () => state.overview && renderChart(state.overview.throughput));
  wirePager("#domains-pager", "domains", refreshDomains);
  wirePager("#crawls-pager", "crawls", refreshCrawls);
}

// --- live updates ---------------------------------------------------------------------------------
function render(overview) {
  state.overview = overview;
  state.receivedAt = Date.now();
  renderSummary(overview.summary);
  renderNodes(overview.nodes);
  renderChart(overview.throughput);
  renderErrors(overview.errors);
  renderConfig(overview.config);
  refreshDomains();
  refreshCrawls();
}
function showFreshness() {
  if (!state.overview) return;
  const age = Date.now() - state.overview.generated_at_ms;
  const badge = $("#live");
  const stale = Date.now() - state.receivedAt > STALE_MS;
  badge.textContent = stale ? "stale" : "live";
  badge.className = stale ? "badge stale" : "badge live";
  $("#updated").textContent = `snapshot ${(Math.max(0, age) / 1000).toFixed(1)} s old`;
}
function connect() {
  const events = new EventSource(`${BASE}/events`);
  events.addEventListener("snapshot", (event) => render(JSON.parse(event.data)));
  events.addEventListener("failure", (event) => {
    const badge = $("#live");
    badge.textContent = JSON.parse(event.data).message;
    badge.className = "badge down";
  });
  events.onerror = () => { $("#live").textContent = "reconnecting…"; $("#live").className = "badge stale"; };
}

wireForms();
connect();
setInterval(showFreshness, 1000);
