"use strict";
// What the admin endpoint's pages (/ui, /ui/stream, /ui/cache) share:
// element helpers, the token field (kept for the tab in sessionStorage,
// sent as a bearer token), the status line, the page config (GET
// /ui/config), and the sparklines of a counter's last minute of rates.
// Served embedded as /ui/common.js, same origin, no build step.
const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function headers() {
  const t = $("token").value.trim();
  return t ? { Authorization: "Bearer " + t } : {};
}

function status(text, err) {
  $("status").textContent = text;
  $("status").classList.toggle("err", !!err);
}

// getJSON fetches an admin route with the token; the body is {} when it
// is not JSON.
async function getJSON(path) {
  const res = await fetch(path, { headers: headers(), cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  return { res, body };
}

// startPage restores the token field, reads the config (hiding the
// token field when no token is needed) and hands it to run.
async function startPage(run) {
  $("token").value = sessionStorage.getItem("felix.token") || "";
  $("token").addEventListener("change", () => sessionStorage.setItem("felix.token", $("token").value.trim()));
  let config = { chaos: false, need_token: true, node_id: "" };
  try {
    const res = await fetch("/ui/config", { cache: "no-store" });
    config = await res.json();
  } catch (e) {
    status("config: " + e.message, true);
  }
  $("tokenbox").classList.toggle("hidden", !config.need_token);
  run(config);
}

const num = (x) => (x === undefined || x === null ? "–" : String(x));

const keep = 61; // samples of a sparkline: 60 rates

// sample adds a (time, counter) point, keeping the last minute.
function sample(list, at, value) {
  if (list.length && list[list.length - 1].at === at) return;
  list.push({ at, value });
  if (list.length > keep) list.shift();
}

// rates turns counter samples into per-second rates (a counter that went
// back, a restarted broker's, counts as 0).
function rates(list) {
  const out = [];
  for (let i = 1; i < list.length; i++) {
    const dt = (list[i].at - list[i - 1].at) / 1000;
    out.push(dt > 0 ? Math.max(0, list[i].value - list[i - 1].value) / dt : 0);
  }
  return out;
}

const svgNS = "http://www.w3.org/2000/svg";
function spark() {
  const wrap = el("span", "sparkwrap");
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", "120");
  svg.setAttribute("height", "22");
  wrap.append(svg, el("span", "rate"));
  return wrap;
}

// draw plots the rates of samples as a sparkline of bars, one per second,
// the newest on the right; data-max and data-points say what it shows (the
// tests read them).
function draw(wrap, samples) {
  const r = rates(samples);
  const svg = wrap.querySelector("svg");
  const maxRate = Math.max(0, ...r);
  const top = maxRate > 0 ? maxRate : 1;
  const step = 120 / (keep - 1);
  const x0 = 120 - step * r.length;
  const bars = r.map((v, i) => {
    const h = v > 0 ? Math.max(1, (21 * v) / top) : 0;
    const b = document.createElementNS(svgNS, "rect");
    b.setAttribute("x", (x0 + i * step).toFixed(1));
    b.setAttribute("y", (22 - h).toFixed(1));
    b.setAttribute("width", (step * 0.8).toFixed(1));
    b.setAttribute("height", h.toFixed(1));
    return b;
  });
  svg.replaceChildren(...bars);
  svg.dataset.points = r.length;
  svg.dataset.max = maxRate;
  const now = r.length ? r[r.length - 1] : 0;
  wrap.querySelector(".rate").textContent = r.length ? Math.round(now) + "/s (max " + Math.round(maxRate) + ")" : "…";
}

function fact(dl, name, value) {
  dl.append(el("dt", "", name), el("dd", "", value));
}

