"use strict";
// What the admin endpoint's pages (/ui, /ui/stream) share: element
// helpers, the token field (kept for the tab in sessionStorage, sent as a
// bearer token), the status line, and the page config (GET /ui/config).
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
