// The mqksbridge dashboard: polls the JSON API once a second and redraws. No build step,
// no library: tables are DOM, the per-door rate charts are a canvas, the flow view is SVG.
// With users configured it shows a login form first: the session is an HttpOnly cookie,
// and every action sends the session's CSRF token (docs/admin.md, "Logging in").
"use strict";

const POLL_MS = 1000;
const DOOR_ORDER = ["mqks", "malamute", "twino", "textqueue"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function num(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) || n >= 100 ? String(Math.round(n)) : n.toFixed(1);
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

function duration(seconds) {
  const s = Math.floor(seconds), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600);
  const m = Math.floor(s % 3600 / 60);
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
}

function doorTag(name) { return el("span", {class: "door-tag " + name}, name); }

class LoggedOut extends Error {}

let csrf = null;            // the session's token for actions (null: not a session)

async function getJSON(path) {
  const response = await fetch(path, {cache: "no-store"});
  if (response.status === 401) throw new LoggedOut((await response.json()).error);
  if (!response.ok) throw new Error(path + ": " + response.status);
  return response.json();
}

async function post(path, body) {
  const headers = {"Content-Type": "application/json"};
  if (csrf) headers["X-CSRF-Token"] = csrf;
  const response = await fetch(path, {method: "POST", headers, cache: "no-store",
                                      body: JSON.stringify(body || {})});
  const answer = await response.json();
  if (response.status === 401) throw new LoggedOut(answer.error);
  if (!response.ok) throw new Error(answer.error || String(response.status));
  return answer;
}

// -- doors and their rate charts -------------------------------------------------------------
const cards = {};

function doorCard(door) {
  let card = cards[door.name];
  if (!card) {
    const canvas = el("canvas", {width: 520, height: 160});
    card = cards[door.name] = {
      root: el("div", {class: "card " + door.name, "data-door": door.name}),
      title: el("h3", {}, door.name), listen: el("div", {class: "listen"}),
      stats: el("div", {class: "stats"}), canvas,
    };
    card.root.append(card.title, card.listen, card.stats, canvas,
      el("div", {class: "legend"}, el("span", {class: "in"}, "━ in/s"), "  ",
         el("span", {class: "out"}, "━ out/s")));
    document.getElementById("doors").append(card.root);
  }
  card.listen.textContent = door.listeners.length
    ? door.listeners.map(l => l.bound || l.endpoint).join(", ") : "not listening";
  card.stats.replaceChildren(
    el("span", {}, el("b", {}, num(door.connections)), " conns"),
    el("span", {}, el("b", {}, num(door.rates.messages_in)), " in/s"),
    el("span", {}, el("b", {}, num(door.rates.messages_out)), " out/s"),
    el("span", {}, bytes(door.bytes_in), " / ", bytes(door.bytes_out)));
  drawChart(card.canvas, door.history);
}

function drawChart(canvas, history) {
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height, pad = 22;
  ctx.clearRect(0, 0, w, h);
  let top = 1;
  for (const [, i, o] of history) top = Math.max(top, i, o);
  ctx.strokeStyle = "#e2e6ec"; ctx.fillStyle = "#6b7585"; ctx.font = "18px system-ui";
  ctx.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const y = h - pad - f * (h - 2 * pad);
    ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(w, y); ctx.stroke();
    if (f) ctx.fillText(num(top * f) + "/s", 4, y - 3);   // idle: 0.5/s and 1/s
  }
  const span = 120;          // samples across the width
  const x = k => w - (history.length - 1 - k) * (w / (span - 1));
  const y = v => h - pad - v / top * (h - 2 * pad);
  for (const [index, color] of [[1, "#2f6fde"], [2, "#1aa179"]]) {
    ctx.strokeStyle = color; ctx.lineWidth = 3; ctx.beginPath();
    history.forEach((point, k) => k ? ctx.lineTo(x(k), y(point[index]))
                                      : ctx.moveTo(x(k), y(point[index])));
    ctx.stroke();
  }
}

// -- door-to-door flows (SVG) ----------------------------------------------------------------
function drawFlows(flows, doors) {
  const area = document.getElementById("flows");
  const names = DOOR_ORDER.filter(n => doors.includes(n)).concat(
    doors.filter(n => !DOOR_ORDER.includes(n)));
  for (const f of flows) { if (!names.includes(f.from)) names.push(f.from); }
  const rowY = k => 40 + k * (180 / Math.max(1, names.length - 1));
  const left = 120, right = 520;
  const most = Math.max(1, ...flows.map(f => f.messages));
  const colors = {mqks: "#2f6fde", malamute: "#d9822b", twino: "#8e44ad"};
  const nodes = [];
  for (const f of flows) {
    if (!f.messages) continue;
    const y1 = rowY(names.indexOf(f.from)), y2 = rowY(names.indexOf(f.to));
    const width = 2 + 18 * Math.sqrt(f.messages / most);
    nodes.push(svg("path", {d: `M${left},${y1} C${(left + right) / 2},${y1} ${(left + right) / 2},${y2} ${right},${y2}`,
      stroke: colors[f.from] || "#6b7585", "stroke-width": width, fill: "none", opacity: 0.55,
      "data-from": f.from, "data-to": f.to},
      undefined));
    // the label sits a third of the way along the curve, so flows from one door fan out
    const t = 0.3, mid = (left + right) / 2, u = 1 - t;
    const lx = u * u * u * left + 3 * u * t * mid + t * t * t * right;
    const ly = y1 + (y2 - y1) * (3 * t * t - 2 * t * t * t);
    nodes.push(svg("text", {x: lx, y: ly - width / 2 - 3, "text-anchor": "middle",
      class: "count"}, `${num(f.messages)} (${num(f.rate)}/s)`));
  }
  names.forEach((name, k) => {
    const y = rowY(k);
    nodes.push(svg("circle", {cx: left, cy: y, r: 7, fill: colors[name] || "#6b7585"}));
    nodes.push(svg("circle", {cx: right, cy: y, r: 7, fill: colors[name] || "#6b7585"}));
    nodes.push(svg("text", {x: left - 14, y: y + 4, "text-anchor": "end"}, name));
    nodes.push(svg("text", {x: right + 14, y: y + 4}, name));
  });
  if (!flows.some(f => f.messages)) {
    nodes.push(svg("text", {x: 320, y: 135, "text-anchor": "middle", class: "count"},
      "no deliveries yet"));
  }
  area.replaceChildren(...nodes);
  flowMatrix(flows, names);
}

function flowMatrix(flows, names) {
  const cell = {};
  for (const f of flows) cell[f.from + ">" + f.to] = f;
  const head = el("tr", {}, el("th", {}, "from ↓ to →"), ...names.map(n => el("th", {class: "n"}, n)));
  const rows = names.map(from => el("tr", {}, el("th", {}, doorTag(from)), ...names.map(to => {
    const f = cell[from + ">" + to];
    return el("td", {class: "n", "data-from": from, "data-to": to},
      f ? `${num(f.messages)} · ${num(f.rate)}/s` : "–");
  })));
  document.getElementById("flow-matrix").replaceChildren(el("thead", {}, head),
    el("tbody", {}, ...rows));
}

// -- tables ----------------------------------------------------------------------------------
function fillTable(id, rows, empty) {
  const body = document.querySelector(`#${id} tbody`);
  if (!rows.length) {
    body.replaceChildren(el("tr", {}, el("td", {colspan: 10, class: "empty"}, empty)));
    return;
  }
  body.replaceChildren(...rows);
}

function queueRow(q) {
  const consumers = el("td", {});
  for (const [door, n] of Object.entries(q.consumers_by_door)) {
    consumers.append(doorTag(door), n + " ");
  }
  if (!q.consumers) consumers.append(el("span", {class: "empty"}, "none"));
  return el("tr", {"data-queue": q.name},
    el("td", {}, q.name), el("td", {}, q.mode),
    el("td", {class: "n depth" + (q.depth ? " deep" : "")}, num(q.depth)),
    el("td", {class: "n"}, num(q.priority_depth)), el("td", {class: "n"}, num(q.unacked)),
    consumers, el("td", {class: "n"}, num(q.rates.publish)),
    el("td", {class: "n"}, num(q.rates.deliver)), el("td", {class: "n"}, num(q.rates.ack)),
    el("td", {class: "actions"},
       el("button", {type: "button", "data-action": q.paused ? "resume" : "pause"},
          q.paused ? "resume" : "pause"),
       el("button", {type: "button", "data-action": "purge"}, "purge")));
}

// -- actions (one listener on the table body: its rows are redrawn every second) -------------
async function queueAction(event) {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const queue = button.closest("tr").dataset.queue, action = button.dataset.action;
  if (action === "purge" && !confirm(`Drop every waiting message of ${queue}?`)) return;
  const status = document.getElementById("action-status");
  try {
    await post(`/api/queues/${encodeURIComponent(queue)}/${action}`);
    status.className = "";
    status.textContent = `${action} ${queue}: done`;
  } catch (error) {
    if (error instanceof LoggedOut) return showLogin(error.message);
    status.className = "error";
    status.textContent = `${action} ${queue}: ${error.message}`;
  }
  refresh();
}

function connectionRow(c) {
  const client = c.client ? (c.client.name || c.client.id) : "(no session)";
  return el("tr", {"data-connection": c.id},
    el("td", {}, doorTag(c.door)), el("td", {}, c.peer), el("td", {}, client),
    el("td", {class: "n"}, num(c.consumers)), el("td", {class: "n"}, num(c.unacked)),
    el("td", {class: "n"}, num(c.messages_in)), el("td", {class: "n"}, num(c.messages_out)),
    el("td", {class: "n"}, bytes(c.bytes_in)), el("td", {class: "n"}, bytes(c.bytes_out)));
}

// -- the cluster (a gateway's /api/cluster; hidden on the embedded engine) --------------------
function showCluster(c) {
  const section = document.getElementById("cluster-section");
  section.hidden = c.engine !== "rabbitmq";
  if (section.hidden) return;
  const clients = Object.values(c.clients).reduce((a, b) => a + b, 0);
  document.getElementById("cluster-meta").textContent =
    `gateway ${c.gateway} · ` + (c.connected ? `connected to ${c.connected}` :
      `NOT connected: ${c.failure || "connecting"}`) + ` · ${num(clients)} clients here` +
    (c.error ? ` · management API: ${c.error}` : "");
  fillTable("cluster-nodes", c.nodes.map(n => el("tr", {"data-node": n.name},
    el("td", {}, n.name), el("td", {class: n.running ? "" : "down"}, n.running ? "running" : "down"),
    el("td", {class: "n"}, duration(n.uptime)), el("td", {class: "n"}, bytes(n.memory)),
    el("td", {}, n.alarms.join(", ") || "–"))), "no answer from RabbitMQ");
  fillTable("cluster-gateways", c.gateways.map(g => el("tr", {"data-gateway": g.name},
    el("td", {}, g.name), el("td", {}, g.node || "–"), el("td", {class: "n"}, num(g.channels)),
    el("td", {class: "n"}, g.name === c.gateway ? num(clients) : "–"))),
    "no gateway seen by RabbitMQ");
  fillTable("cluster-queues", c.queues.map(q => el("tr", {"data-queue": q.name},
    el("td", {}, q.name), el("td", {}, q.type), el("td", {}, q.leader || "–"),
    el("td", {class: "n replicas" + (q.online < q.replicas ? " down" : "")},
       `${q.online}/${q.replicas}`),
    el("td", {class: "n"}, num(q.messages)), el("td", {class: "n"}, num(q.unacked)),
    el("td", {class: "n"}, num(q.consumers)))), "no queues in RabbitMQ");
}

// -- the loop --------------------------------------------------------------------------------
async function refresh() {
  const status = document.getElementById("status");
  try {
    const [overview, queues, connections, cluster] = await Promise.all([
      getJSON("/api/overview"), getJSON("/api/queues?limit=200"),
      getJSON("/api/connections?limit=200"), getJSON("/api/cluster")]);
    showCluster(cluster);
    document.getElementById("meta").textContent =
      `v${overview.version} · ${overview.node} · up ${duration(overview.uptime)} · ` +
      `${num(overview.totals.messages_queued)} queued · ${num(overview.rates.messages_in)} in/s · ` +
      `${num(overview.rates.messages_out)} out/s`;
    overview.doors.forEach(doorCard);
    drawFlows(overview.flows, overview.doors.map(d => d.name));
    fillTable("queues", queues.items.map(queueRow), "no queues");
    document.getElementById("queue-count").textContent =
      `${queues.total} in all` + (queues.total > queues.items.length ? ", first 200 shown" : "");
    fillTable("connections", connections.items.map(connectionRow), "no connections");
    document.getElementById("connection-count").textContent = `${connections.total} open`;
    status.classList.add("live");
    status.title = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  } catch (error) {
    if (error instanceof LoggedOut) return showLogin(error.message);
    status.classList.remove("live");
    status.title = String(error);
  }
}

// -- logging in and out ----------------------------------------------------------------------
let generation = 0;         // a login starts a new polling loop; showLogin ends the old one

async function loop(mine) {
  if (mine !== generation) return;
  await refresh();
  setTimeout(() => loop(mine), POLL_MS);
}

function signedIn(session) {
  csrf = session.csrf;
  document.getElementById("who").textContent = session.user ? session.user : "";
  document.getElementById("logout").hidden = session.via !== "session";
  document.getElementById("login").hidden = true;
  document.getElementById("dashboard").hidden = false;
  loop(++generation);
}

function showLogin(message) {
  generation++;
  csrf = null;
  document.getElementById("dashboard").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("login-user").focus();
}

async function logIn(event) {
  event.preventDefault();
  const error = document.getElementById("login-error");
  const response = await fetch("/api/login", {method: "POST", cache: "no-store",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({user: document.getElementById("login-user").value,
                          password: document.getElementById("login-password").value})});
  const answer = await response.json();
  document.getElementById("login-password").value = "";
  if (!response.ok) { error.textContent = answer.error; return; }
  error.textContent = "";
  signedIn(answer);
}

async function logOut() {
  try { await post("/api/logout"); } catch (error) { /* gone already: log in again */ }
  showLogin("logged out");
}

async function start() {
  document.getElementById("login-form").addEventListener("submit", logIn);
  document.getElementById("logout").addEventListener("click", logOut);
  document.querySelector("#queues tbody").addEventListener("click", queueAction);
  const response = await fetch("/api/session", {cache: "no-store"});
  if (response.ok) signedIn(await response.json());
  else showLogin(response.status === 401 ? "" : `the admin API answered ${response.status}`);
}

start();
