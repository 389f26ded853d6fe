// sotd web: the page. Every string from the server is put in the document with textContent (never as
// markup), so a name, a summary, a mail or a screen that holds "<b>" or an escape sequence shows as text.
"use strict";

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function replace(node, children) {
  node.replaceChildren(...children);
}

function renderHandles(state) {
  const body = document.querySelector("#handles tbody");
  const rows = state.handles.map((h) => {
    const tr = el("tr", { "data-handle": h.name, "data-colour": h.colour, class: "c-" + h.colour + (h.live ? "" : " stale") + (h.me ? " me" : "") });
    const dot = el("td"); dot.appendChild(el("span", { class: "dot", title: h.state }));
    tr.appendChild(dot);
    tr.appendChild(el("td", { class: "name" }, "@" + h.name + (h.me ? " (you)" : "")));
    tr.appendChild(el("td", { class: "host" }, h.host + (h.box && h.box !== h.host ? " (via " + h.box + ")" : "")));
    tr.appendChild(el("td", {}, h.repo));
    tr.appendChild(el("td", { class: "liveness" }, h.live ? "live" : "stale"));
    const st = el("td", { class: "state" });
    st.appendChild(el("span", { class: "state-name" }, h.state));
    if (h.summary) st.appendChild(el("span", { class: "summary" }, " " + h.summary));
    tr.appendChild(st);
    tr.appendChild(el("td", { class: "unread" }, h.unread === null ? "" : h.unread));
    tr.appendChild(el("td", {}, h.seen));
    return tr;
  });
  replace(body, rows);
  document.getElementById("problem").textContent = state.problem || "";
}

function renderDaemon(state) {
  const d = state.daemon;
  const p = document.getElementById("daemon");
  p.textContent = "daemon: " + d.line;
  p.className = "daemon" + (d.up ? "" : " down");
  const items = [];
  if (d.link) items.push(el("li", { "data-link": d.link.endpoint, class: d.link.up ? "up" : "down" },
    "link to the hub at " + d.link.endpoint + ": " + (d.link.up ? "up" : "down") + " since " + d.link.since + (d.link.error ? ": " + d.link.error : "")));
  for (const box of d.links || []) items.push(el("li", { "data-linked": box, class: "up" }, "linked here: " + box + " (up)"));
  for (const b of d.boxes || []) {
    if (b.scripts) {
      items.push(el("li", { "data-box": b.box, "data-scripts": "1", class: "scripts" },
        "box " + b.box + ": no sotd daemon answers for it (the 0.6.6 scripts, or a daemon not linked here); this folder's registry lists " +
        b.handles + " handles of it, " + b.live + " live"));
      continue;
    }
    items.push(el("li", { "data-box": b.box, class: b.error ? "down" : "up" },
      "box " + b.box + ": " + (b.error ? b.error : b.handles + " handles")));
  }
  if (d.error) items.push(el("li", { class: "down" }, d.error));
  replace(document.getElementById("links"), items);
}

function renderRows(state) {
  const divs = state.rows.map((r) => {
    const div = el("div", { class: "row", "data-row": r.id, "data-phase": r.phase });
    div.appendChild(el("strong", {}, r.label));
    div.appendChild(el("span", { class: "phase" }, " " + r.phase + " · " + r.agent + (r.handle ? " · @" + r.handle : "") + " · " + r.root));
    const b = el("button", { type: "button", class: "despawn" }, "despawn");
    b.addEventListener("click", () => act("despawn", { id: r.id }, "spawn-answer"));
    div.appendChild(b);
    if (r.attach) div.appendChild(el("pre", { class: "attach" }, r.attach));
    div.appendChild(el("pre", { class: "screen" }, r.screen));
    return div;
  });
  if (!divs.length) divs.push(el("p", {}, "(no rows)"));
  replace(document.getElementById("rows"), divs);
}

function renderMail(state) {
  const items = state.mail.map((m) => {
    const li = el("li", { class: "mail" });
    li.appendChild(el("span", { class: "head" }, m.ts + "  @" + m.from + " → @" + m.to + ": "));
    li.appendChild(el("span", { class: "msg" }, m.msg));
    return li;
  });
  replace(document.getElementById("mail"), items);
}

function renderOcx(state) {
  const o = state.ocx || { runs: [], why: "" };
  document.getElementById("ocx-why").textContent = o.runs.length ? "" : (o.why || "(no runs)");
  document.getElementById("ocx").hidden = !o.runs.length;
  const rows = o.runs.map((r) => {
    const tr = el("tr", { "data-run": r.run, "data-phase": r.phase });
    for (const v of [r.run, r.repo, r.to, r.sender, r.phase, r.outcome + (r.limit ? " (" + r.limit + ")" : ""),
      r.limits_hit.join(", "), r.outputs.join(", ")]) tr.appendChild(el("td", {}, v));
    return tr;
  });
  replace(document.querySelector("#ocx tbody"), rows);
}

function render(state) {
  document.getElementById("box").textContent = "on " + state.box.host + (state.box.me ? " as @" + state.box.me : "");
  renderDaemon(state);
  renderHandles(state);
  renderRows(state);
  renderMail(state);
  renderOcx(state);
}

async function act(action, form, answerId) {
  const out = document.getElementById(answerId);
  out.textContent = "…";
  try {
    const r = await fetch("/api/" + action, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(form) });
    const a = r.ok ? await r.json() : { ok: false, text: "refused: " + r.status };
    out.textContent = a.text;
    out.className = "answer" + (a.ok ? "" : " failed");
  } catch (e) {
    out.textContent = "the server did not answer: " + e;
    out.className = "answer failed";
  }
}

function start() {
  document.getElementById("send-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    act("send", { to: document.getElementById("send-to").value, text: document.getElementById("send-text").value }, "send-answer");
  });
  document.getElementById("spawn-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    act("spawn", {
      path: document.getElementById("spawn-path").value, name: document.getElementById("spawn-name").value,
      agent: document.getElementById("spawn-agent").value, command: document.getElementById("spawn-command").value,
    }, "spawn-answer");
  });
  const live = document.getElementById("live");
  const events = new EventSource("/events");
  events.addEventListener("state", (ev) => {
    render(JSON.parse(ev.data));
    live.textContent = "live · " + new Date().toLocaleTimeString();
    live.className = "live";
    document.body.dataset.updated = String(Date.now());
  });
  events.onerror = () => { live.textContent = "connection lost: retrying"; live.className = "live lost"; };
}

document.addEventListener("DOMContentLoaded", start);
