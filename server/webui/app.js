// lem's chat page: talks to this server's /v1/models and streamed
// /v1/chat/completions, keeps conversations in localStorage. Model text is
// escaped before any Markdown is applied (see markdown below).
"use strict";

const $ = (id) => document.getElementById(id);
const store = {
  key: "lem.conversations",
  load() {
    try {
      const v = JSON.parse(localStorage.getItem(this.key) || "[]");
      return Array.isArray(v) ? v : [];
    } catch { return []; }
  },
  save(convs) { localStorage.setItem(this.key, JSON.stringify(convs)); },
};

let convs = store.load();
let current = null; // the conversation shown
let models = [];
let controller = null; // the AbortController of the reply being streamed

// escapeHTML makes text safe to place in HTML, in elements and in quoted
// attributes alike.
function escapeHTML(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

// inline renders code spans, links, bold and italics of one escaped line.
// Code spans are set aside first so that nothing inside them is formatted.
function inline(escaped) {
  const codes = [];
  let s = escaped.replace(/`([^`]+)`/g, (_, c) => { codes.push(c); return "\u0000" + (codes.length - 1) + "\u0000"; });
  s = s.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (m, text, url) => {
    if (!/^(https?:|mailto:)/i.test(url)) return m;
    return '<a href="' + url + '" target="_blank" rel="noopener noreferrer">' + text + "</a>";
  });
  s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>").replace(/__([^_]+)__/g, "<strong>$1</strong>");
  s = s.replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>").replace(/(^|[^\w_])_([^_\s][^_]*)_(?!\w)/g, "$1<em>$2</em>");
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => "<code>" + codes[+i] + "</code>");
}

// markdown renders a reply: headings, paragraphs, lists, fenced code
// blocks (with a copy button) and the inline forms above. The whole text
// is escaped first, so any HTML in it shows as text.
function markdown(text) {
  const lines = escapeHTML(text).split("\n");
  const out = [];
  let para = [], list = null;
  const flushPara = () => { if (para.length) { out.push("<p>" + para.map(inline).join("<br>") + "</p>"); para = []; } };
  const flushList = () => { if (list) { out.push("<" + list.tag + ">" + list.items.map((i) => "<li>" + inline(i) + "</li>").join("") + "</" + list.tag + ">"); list = null; } };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+#.-]*)\s*$/);
    if (fence) {
      flushPara(); flushList();
      const code = [];
      for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) code.push(lines[i]);
      const lang = fence[1] ? ' class="language-' + fence[1] + '"' : "";
      out.push('<pre><button type="button" class="copy" aria-label="Copy code">Copy</button><code' + lang + ">" + code.join("\n") + "</code></pre>");
      continue;
    }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    const ul = line.match(/^\s*[-*+]\s+(.*)$/);
    const ol = line.match(/^\s*\d+[.)]\s+(.*)$/);
    if (h) {
      flushPara(); flushList();
      out.push("<h" + h[1].length + ">" + inline(h[2]) + "</h" + h[1].length + ">");
    } else if (ul || ol) {
      flushPara();
      const tag = ul ? "ul" : "ol";
      if (list && list.tag !== tag) flushList();
      if (!list) list = { tag, items: [] };
      list.items.push((ul || ol)[1]);
    } else if (line.trim() === "") {
      flushPara(); flushList();
    } else {
      flushList();
      para.push(line);
    }
  }
  flushPara(); flushList();
  return out.join("\n");
}

// api calls the server with the session's API key, if any.
async function api(path, init = {}) {
  const headers = Object.assign({}, init.headers);
  const key = sessionStorage.getItem("lem.apiKey");
  if (key) headers.Authorization = "Bearer " + key;
  const resp = await fetch(path, Object.assign({}, init, { headers }));
  if (resp.status === 401) {
    $("key-form").hidden = false;
    $("api-key").focus();
    throw new Error("the server needs an API key");
  }
  if (!resp.ok) {
    let msg = resp.status + " " + resp.statusText;
    try { const e = await resp.json(); msg = (e.error && (e.error.message || e.error)) || msg; } catch {}
    throw new Error(msg);
  }
  return resp;
}

async function loadModels() {
  try {
    const resp = await api("/v1/models");
    const data = (await resp.json()).data || [];
    models = data.map((m) => m.id);
    const sel = $("model");
    sel.replaceChildren(...models.map((id) => { const o = document.createElement("option"); o.value = o.textContent = id; return o; }));
    $("model-label").hidden = models.length < 2;
    $("model-name").textContent = models.length === 1 ? models[0] : "";
    if (current && models.includes(current.model)) sel.value = current.model;
    $("key-form").hidden = true;
    setStatus("");
  } catch (err) { setStatus(err.message); }
}

function setStatus(msg) { $("status").textContent = msg; }

function newConversation() {
  current = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [] };
  renderList(); renderMessages();
  $("input").focus();
}

function saveCurrent() {
  if (!current || current.messages.length === 0) return;
  const i = convs.findIndex((c) => c.id === current.id);
  if (i < 0) convs.unshift(current); else convs[i] = current;
  store.save(convs);
  renderList();
}

function renderList() {
  const ul = $("conversations");
  ul.replaceChildren(...convs.map((c) => {
    const li = document.createElement("li");
    if (current && c.id === current.id) li.setAttribute("aria-current", "true");
    const open = document.createElement("button");
    open.type = "button"; open.className = "open"; open.textContent = c.title; open.title = c.title;
    open.addEventListener("click", () => { if (!controller) { current = c; renderList(); renderMessages(); } });
    const del = document.createElement("button");
    del.type = "button"; del.className = "delete"; del.textContent = "×";
    del.setAttribute("aria-label", "Delete " + c.title);
    del.addEventListener("click", () => {
      if (controller && current && current.id === c.id) return;
      convs = convs.filter((x) => x.id !== c.id);
      store.save(convs);
      if (current && current.id === c.id) newConversation(); else renderList();
    });
    li.append(open, del);
    return li;
  }));
}

// messageNode builds the element of one message; an assistant's content
// goes through markdown, its reasoning into a folded <details>, as text.
function messageNode(m) {
  const div = document.createElement("div");
  div.className = "msg " + m.role;
  if (m.role === "user") { div.textContent = m.content; return div; }
  updateAssistant(div, m);
  return div;
}

function updateAssistant(div, m) {
  let det = div.querySelector("details.reasoning");
  if (m.reasoning) {
    if (!det) {
      det = document.createElement("details");
      det.className = "reasoning";
      det.innerHTML = "<summary>Reasoning</summary><div></div>";
      div.prepend(det);
    }
    det.querySelector("div").textContent = m.reasoning;
  }
  let body = div.querySelector(".content");
  if (!body) { body = document.createElement("div"); body.className = "content"; div.append(body); }
  body.innerHTML = markdown(m.content || "");
  let note = div.querySelector(".note");
  if (m.note) {
    if (!note) { note = document.createElement("div"); note.className = "note"; div.append(note); }
    note.textContent = m.note;
  } else if (note) note.remove();
}

function renderMessages() {
  $("messages").replaceChildren(...(current ? current.messages : []).map(messageNode));
  if (current && current.model && models.includes(current.model)) $("model").value = current.model;
  scrollDown();
}

function scrollDown() { const m = $("messages"); m.scrollTop = m.scrollHeight; }

// params reads the settings; a bad value is an error shown to the user.
function params() {
  const p = {};
  const num = (id, name, int) => {
    const v = $(id).value.trim();
    if (v === "") return;
    const n = Number(v);
    if (!Number.isFinite(n) || (int && !Number.isInteger(n))) throw new Error($(id).labels[0].textContent + ": not a number");
    p[name] = n;
  };
  num("temperature", "temperature"); num("top-p", "top_p"); num("max-tokens", "max_tokens", true);
  const extra = $("extra").value.trim();
  if (extra) {
    let e;
    try { e = JSON.parse(extra); } catch (err) { throw new Error("Extra parameters: " + err.message); }
    if (!e || typeof e !== "object" || Array.isArray(e)) throw new Error("Extra parameters: not a JSON object");
    Object.assign(p, e);
  }
  return p;
}

function busy(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
  $("input").readOnly = on;
  $("input").focus();
}

async function send() {
  const text = $("input").value;
  if (controller || text.trim() === "") return;
  let extra;
  try { extra = params(); $("settings-error").textContent = ""; } catch (err) { $("settings-error").textContent = err.message; $("settings").open = true; return; }
  if (!current) newConversation();
  const conv = current;
  if (conv.messages.length === 0) conv.title = text.trim().slice(0, 60);
  conv.model = $("model").value || models[0];
  conv.messages.push({ role: "user", content: text });
  const reply = { role: "assistant", content: "", reasoning: "" };
  conv.messages.push(reply);
  $("input").value = "";
  renderMessages();
  const node = $("messages").lastElementChild;
  const history = conv.messages.slice(0, -1).map((m) => ({ role: m.role, content: m.content }));
  const system = $("system").value.trim();
  if (system) history.unshift({ role: "system", content: system });
  const body = Object.assign({ model: conv.model, messages: history, stream: true }, extra);
  controller = new AbortController();
  busy(true); setStatus("");
  let pending = false;
  const draw = () => { pending = false; updateAssistant(node, reply); scrollDown(); };
  try {
    const resp = await api("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal: controller.signal });
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "", done = false;
    while (!done) {
      const r = await reader.read();
      if (r.done) break;
      buf += dec.decode(r.value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") { done = true; break; }
        const ev = JSON.parse(data);
        if (ev.error) throw new Error(ev.error.message || String(ev.error));
        const d = (ev.choices && ev.choices[0] && ev.choices[0].delta) || {};
        if (d.reasoning_content) reply.reasoning += d.reasoning_content;
        if (d.content) reply.content += d.content;
        const fin = ev.choices && ev.choices[0] && ev.choices[0].finish_reason;
        if (fin === "length") reply.note = "(cut at the token limit)";
        if (!pending) { pending = true; requestAnimationFrame(draw); }
      }
    }
  } catch (err) {
    if (err.name === "AbortError") reply.note = "(stopped)";
    else { reply.note = "(error: " + err.message + ")"; setStatus(err.message); }
  } finally {
    controller = null;
    draw();
    saveCurrent();
    busy(false);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $("stop").addEventListener("click", () => { if (controller) controller.abort(); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && controller) controller.abort(); });
  $("new-chat").addEventListener("click", () => { if (!controller) newConversation(); });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("lem.apiKey", $("api-key").value);
    $("api-key").value = "";
    loadModels();
  });
  $("messages").addEventListener("click", (e) => {
    const b = e.target.closest("button.copy");
    if (!b) return;
    const code = b.parentElement.querySelector("code").textContent;
    navigator.clipboard.writeText(code).then(() => { b.textContent = "Copied"; }, () => { b.textContent = "Copy failed"; });
  });
  current = convs[0] || null;
  if (!current) newConversation(); else { renderList(); renderMessages(); }
  loadModels();
});
