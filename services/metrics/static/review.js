// The review page: one item at a time, decided with buttons or keys (a, r, s, e); u undoes the last decision.
"use strict";

const API = new URL(".", window.location.href).pathname.replace(/\/$/, "");  // the /review prefix
const TOKEN_KEY = "flawforge-review-token";
// Set in this tab once the reviewer confirmed a decision sent by a single key: a stray key press (or one a
// page in front of this one provoked) never decides the first item unasked.
const KEYS_CONFIRMED = "flawforge-review-keys-confirmed";
const $ = (id) => document.getElementById(id);
const state = { token: null, round: null, assignment: null, editing: false, busy: false };

function say(message) { $("status").textContent = message || ""; }

async function api(method, path, body) {
  const response = await fetch(API + path, {
    method,
    headers: Object.assign({ Authorization: "Bearer " + state.token },
                           body ? { "Content-Type": "application/json" } : {}),
    body: body ? JSON.stringify(body) : undefined,
  });
  if (response.status === 401) { signOut("That token was not accepted."); throw new Error("unauthorized"); }
  if (response.status === 204) return null;
  const data = await response.json();
  if (!response.ok) {
    const detail = Array.isArray(data.detail) ? data.detail.map((d) => d.msg).join("; ") : data.detail;
    throw new Error(detail || response.statusText);
  }
  return data;
}

function show(section) {
  for (const id of ["login", "review", "done"]) $(id).hidden = id !== section;
}

function signOut(message) {
  localStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(KEYS_CONFIRMED);  // whoever signs in next confirms their own first key decision
  state.token = null;
  show("login");
  say(message);
}

function renderSolution(list, text, highlight, className) {
  list.replaceChildren();
  text.split("\n").forEach((line, index) => {
    const item = document.createElement("li");
    item.textContent = line;
    if (index === highlight) item.className = className;
    list.append(item);
  });
}

function renderDiff(diff) {
  const pre = $("code-diff");
  pre.replaceChildren();
  if (!diff) { pre.textContent = "No code diff: the mutated code or the template code is not known."; return; }
  for (const line of diff.split("\n")) {
    const span = document.createElement("span");
    span.textContent = line + "\n";
    if (line.startsWith("@@")) span.className = "hunk";
    else if (line.startsWith("+") && !line.startsWith("+++")) span.className = "add";
    else if (line.startsWith("-") && !line.startsWith("---")) span.className = "del";
    pre.append(span);
  }
}

function renderProgress(p) {
  $("progress").textContent =
    `You: ${p.reviewer_decided} done, ${p.reviewer_available} open · ` +
    `Round: ${p.reviews_done}/${p.reviews_needed} reviews, ${p.items_complete}/${p.items} items complete`;
}

function render(assignment) {
  const item = assignment.item, candidate = item.candidate;
  $("review").dataset.itemId = item.item_id;
  $("item-id").textContent = item.item_id;
  $("error-type").textContent = candidate.error_type.replaceAll("_", " ");
  $("tier").textContent = item.stratum.tier;
  $("position").textContent = item.stratum.position + " error";
  $("line-label").textContent = "line " + candidate.erroneous_line_number;
  $("question").textContent = item.question;
  renderSolution($("original"), candidate.original_solution, item.original_line_index, "same-step");
  renderSolution($("flawed"), candidate.flawed_solution, item.flawed_line_index, "erroneous");
  $("explanation").textContent = candidate.explanation;
  renderDiff(item.code_diff);
  $("comment").value = "";
  setEditing(false);
  renderProgress(assignment.progress);
  show("review");
}

function setEditing(on) {
  state.editing = on;
  $("editor").hidden = !on;
  $("flawed").hidden = on;
  if (on) {
    $("edit-box").value = state.assignment.item.candidate.flawed_solution;
    $("edit-box").focus();
  }
}

async function loadNext() {
  state.assignment = await api("POST", `/rounds/${encodeURIComponent(state.round)}/next`);
  if (state.assignment) { render(state.assignment); return; }
  renderProgress(await api("GET", `/rounds/${encodeURIComponent(state.round)}/progress`));
  show("done");
}

async function decide(kind) {
  if (!state.assignment || state.busy) return;
  if (kind === "edit" && !state.editing) { setEditing(true); return; }
  const item = state.assignment.item;
  const body = { candidate_id: item.candidate.id, kind, comment: $("comment").value };
  if (kind === "edit") body.edited_solution = $("edit-box").value;
  state.busy = true;
  try {
    await api("POST", `/rounds/${encodeURIComponent(state.round)}/items/${encodeURIComponent(item.item_id)}/decisions`, body);
    say("");
    await loadNext();
  } catch (error) {
    say(error.message);
  } finally {
    state.busy = false;
  }
}

// The server withdraws the reviewer's latest decision and hands its item back, which the page shows.
async function undo() {
  if (state.busy || !state.round) return;
  state.busy = true;
  try {
    state.assignment = await api("POST", `/rounds/${encodeURIComponent(state.round)}/undo`);
    render(state.assignment);
    say("Your last decision is withdrawn: decide this item again.");
  } catch (error) {
    say(error.message);
  } finally {
    state.busy = false;
  }
}

// Whether a decision sent by one key may go: the first of the tab's session asks.
function keyDecisionConfirmed(kind) {
  if (sessionStorage.getItem(KEYS_CONFIRMED)) return true;
  if (!window.confirm(`Send "${kind}" for this item? The keys a, r and s decide at once; this is asked once.`)) {
    say("Nothing was sent.");
    return false;
  }
  sessionStorage.setItem(KEYS_CONFIRMED, "yes");
  return true;
}

document.addEventListener("keydown", (event) => {
  if (state.editing) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); decide("edit"); }
    else if (event.key === "Escape") { event.preventDefault(); setEditing(false); }
    return;
  }
  if (($("review").hidden && $("done").hidden) || event.ctrlKey || event.metaKey || event.altKey) return;
  if (["INPUT", "TEXTAREA", "SELECT"].includes(event.target.tagName)) return;
  if (event.key === "u") { event.preventDefault(); undo(); return; }
  if ($("review").hidden) return;
  const kind = { a: "accept", r: "reject", s: "skip", e: "edit" }[event.key];
  if (!kind) return;
  event.preventDefault();
  if (kind === "edit" || keyDecisionConfirmed(kind)) decide(kind);
});

for (const button of document.querySelectorAll(".actions button[data-kind]")) {
  button.addEventListener("click", () => decide(button.dataset.kind));
}
for (const button of document.querySelectorAll("button.undo")) button.addEventListener("click", undo);

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("token").value.trim();
  localStorage.setItem(TOKEN_KEY, state.token);
  start().catch((error) => say(error.message));
});

$("sign-out").addEventListener("click", () => signOut(""));

$("round").addEventListener("change", () => {
  state.round = $("round").value;
  const url = new URL(window.location.href);
  url.searchParams.set("round", state.round);
  history.replaceState(null, "", url);
  loadNext().catch((error) => say(error.message));
});

async function start() {
  const who = await api("GET", "/whoami");
  $("reviewer").textContent = "Reviewer: " + who.reviewer;
  const rounds = await api("GET", "/rounds");
  if (!rounds.length) { say("There is no review round yet."); return; }
  const wanted = new URLSearchParams(window.location.search).get("round");
  state.round = rounds.includes(wanted) ? wanted : rounds[0];
  $("round").replaceChildren(...rounds.map((name) => new Option(name, name, false, name === state.round)));
  await loadNext();
}

// A token may come in the URL fragment (#token=...): it is removed from the address bar, and stored only when
// none is: a link never swaps the signed-in reviewer for another (their next decisions would be the other's).
const fragment = new URLSearchParams(window.location.hash.slice(1));
const offered = fragment.get("token");
let refusal = "";
if (offered) {
  history.replaceState(null, "", window.location.pathname + window.location.search);
  const stored = localStorage.getItem(TOKEN_KEY);
  if (!stored) localStorage.setItem(TOKEN_KEY, offered);
  else if (stored !== offered) {
    refusal = "This link carries another token; you are still signed in with yours. " +
              "Sign out first to use the link's token.";
  }
}
state.token = localStorage.getItem(TOKEN_KEY);
if (state.token) start().then(() => { if (refusal) say(refusal); }).catch((error) => say(error.message));
else show("login");
