// Task detail: the waterfall (with its device lane), collapse/expand of subtrees, keyboard
// navigation (j/k move, Enter opens, Esc closes) and the step panel. The server builds the
// figure; this file keeps the open/closed state, asks for the figure again when it changes, and
// builds the panel from the step's JSON with textContent and hrefs only: trace content is
// hostile and never becomes markup.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  var state = { mode: cfg.mode || "", toggled: [], parents: {}, collapsed: {}, selected: null };
  var status = document.getElementById("waterfall-status");
  var toggleBtn = document.getElementById("toggle-subtree");

  function waterfallUrl(reveal) {
    var q = new URLSearchParams();
    if (state.mode) { q.set("mode", state.mode); }
    if (state.toggled.length) { q.set("toggle", state.toggled.join(",")); }
    if (reveal) { q.set("reveal", reveal); }
    return cfg.waterfall + (cfg.waterfall.indexOf("?") >= 0 ? "&" : "?") + q.toString();
  }

  function load(reveal) {
    var t0 = performance.now();
    status.textContent = "Loading…";
    return A.fetchJSON(waterfallUrl(reveal)).then(function (body) {
      var t1 = performance.now();
      var meta = body.waterfall.layout.meta || {};
      state.mode = meta.mode || state.mode;
      state.toggled = meta.toggled || [];
      state.collapsed = {};
      (meta.collapsed || []).forEach(function (id) { state.collapsed[id] = true; });
      state.parents = {};
      (body.parents || []).forEach(function (id) { state.parents[id] = true; });
      return A.draw("chart-waterfall", body.waterfall).then(function (el) {
        A.msAxis(el);
        var t2 = performance.now();
        window.agentopsTiming = { fetchMs: t1 - t0, drawMs: t2 - t1, totalMs: t2 - t0 };
        status.textContent = (meta.visible || 0) + " of " + (meta.steps || 0) + " steps shown" +
          (meta.webgl ? " (WebGL)" : "") + (meta.collapsed && meta.collapsed.length ? "; ▸ marks collapsed subtrees" : "") +
          " · drawn in " + A.fmtMs(t2 - t0);
        if (!state.bound) {
          state.bound = true;
          el.on("plotly_click", function (ev) {
            var pt = ev.points && ev.points[0];
            if (pt && typeof pt.customdata === "string") { select(pt.customdata); }
          });
          A.draw("chart-budget", body.budget);
        }
        if (state.selected) { highlight(state.selected); updateToggle(); }
        document.body.dataset.waterfallReady = "1";
      });
    }).catch(function (err) { A.fail(["chart-waterfall"], err); status.textContent = ""; });
  }

  // Marker traces drawn over the bars; a step's row is read from its bar.
  var MARKERS = ["findings", "possible findings", "critical path"];

  function rowOf(stepId) {
    var el = document.getElementById("chart-waterfall");
    var data = (el && el.data) || [];
    for (var i = 0; i < data.length; i++) {
      var cd = data[i].customdata || [];
      var j = cd.indexOf(stepId);
      if (j >= 0 && MARKERS.indexOf(data[i].name) < 0) { return data[i].y[j]; }
    }
    return null;
  }

  function highlight(stepId) {
    var y = rowOf(stepId);
    var shapes = y === null ? [] : [{ type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", y0: y - 0.5, y1: y + 0.5,
      fillcolor: "rgba(255, 214, 0, 0.25)", line: { width: 0 }, layer: "below" }];
    Plotly.relayout("chart-waterfall", { shapes: shapes });
  }

  function updateToggle() {
    var id = state.selected;
    toggleBtn.hidden = !state.parents[id];
    toggleBtn.textContent = state.collapsed[id] ? "Expand subtree" : "Collapse subtree";
  }

  // --- the step panel ---
  var panel = document.getElementById("step-panel");
  var current = null;  // the step shown in the panel (its JSON)

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    if (cls) { node.className = cls; }
    return node;
  }

  function link(text, href, title) {
    if (!href) { return el("span", text); }
    var a = el("a", text, "entity-link");
    a.href = href;  // built by the server from the name; a javascript: URL cannot come out of it
    if (title) { a.title = title; }
    return a;
  }

  // JSON indented when a value is, or parses as, an object or array; other text as it came.
  function pretty(value) {
    if (value === null || value === undefined) { return ""; }
    if (typeof value === "string") {
      var t = value.trim();
      if (t.charAt(0) === "{" || t.charAt(0) === "[") {
        try { return JSON.stringify(JSON.parse(t), null, 2); } catch (e) { return value; }
      }
      return value;
    }
    return JSON.stringify(value, null, 2);
  }

  function row(body, label, value) {
    if (value === null || value === undefined || value === "" || (Array.isArray(value) && !value.length)) { return; }
    var tr = el("tr");
    tr.appendChild(el("th", label));
    var td = el("td");
    if (value instanceof Node) { td.appendChild(value); } else { td.textContent = String(value); }
    tr.appendChild(td);
    body.appendChild(tr);
  }

  function section(name, text) {
    document.getElementById("step-" + name).textContent = text || "";
    document.getElementById("step-" + name + "-section").hidden = !text;
  }

  function render(step) {
    current = step;
    var links = step.links || {};
    document.getElementById("step-title").textContent = (step.name || step.tool_name || step.kind) + " (" + step.step_id + ")";
    document.getElementById("step-loading").textContent = "";
    var body = document.querySelector("#step-fields tbody");
    body.textContent = "";
    row(body, "kind", step.kind);
    row(body, "step id", step.step_id);
    row(body, "status", step.status || "ok");
    row(body, "duration", A.fmtMs(step.duration_ms));
    row(body, "starts", step.offset_ms === null || step.offset_ms === undefined ? null : "+" + A.fmtMs(step.offset_ms) + " after the task started");
    var started = el("time", A.fmtTs(step.started_at, "ms"));
    started.setAttribute("datetime", step.started_at);
    started.dataset.ts = "ms";
    row(body, "started at", started);
    row(body, "agent", step.agent ? link(step.agent, links.agent, "the agent's call graph") : null);
    row(body, "tool", step.tool_name ? link(step.tool_name, links.tool, "tasks with a call of this tool") : null);
    row(body, "model", step.model ? link(step.model, links.model, "tasks with a step of this model") : null);
    row(body, "provider", step.provider);
    row(body, "device", step.device ? link(step.device, links.device, "the device's telemetry around this step") : null);
    row(body, "server", step.server ? link(step.server, links.server, "the inference server around this step") : null);
    var withs = step.served_with || [];
    if (withs.length) {
      var span = el("span");
      withs.forEach(function (name, i) {
        if (i) { span.appendChild(document.createTextNode(", ")); }
        span.appendChild(link(name, (links.served_with || [])[i], "its telemetry around this step"));
      });
      row(body, "same host", span);
    }
    row(body, "TTFT", step.ttft_ms === null || step.ttft_ms === undefined ? null : A.fmtMs(step.ttft_ms));
    var tokens = [step.input_tokens, step.output_tokens].some(function (v) { return v !== null && v !== undefined; })
      ? (step.input_tokens === null ? "–" : step.input_tokens) + " in / " + (step.output_tokens === null ? "–" : step.output_tokens) + " out" +
        (step.cached_tokens ? " (" + step.cached_tokens + " cached)" : "") : null;
    row(body, "tokens", tokens);
    row(body, "streamed", step.streamed === null || step.streamed === undefined ? null : (step.streamed ? "yes" : "no"));
    row(body, "tool call id", step.tool_call_id);
    row(body, "requested calls", (step.tool_call_ids || []).join(", "));
    row(body, "parent step", step.parent_step_id);
    row(body, "depends on", (step.depends_on || []).join(", "));
    row(body, "session", step.session_id ? link(step.session_id, links.session, "the session's turns") : null);
    row(body, "task (trace) id", step.task_id);
    section("error", step.error);
    section("args", step.tool_args === null || step.tool_args === undefined ? "" : pretty(step.tool_args));
    section("result", pretty(step.tool_result));
    var attrs = document.querySelector("#step-attributes tbody"), keys = Object.keys(step.attributes || {}).sort();
    attrs.textContent = "";
    keys.forEach(function (k) {
      var v = step.attributes[k], code = el("code", typeof v === "string" ? pretty(v) : JSON.stringify(v, null, 2));
      row(attrs, k, code);
    });
    document.getElementById("step-attributes-section").hidden = !keys.length;
    section("events", step.events && step.events.length ? JSON.stringify(step.events, null, 2) : "");
    document.getElementById("step-json").textContent = JSON.stringify(step, null, 2);
    document.querySelector(".copy-id[data-copy='session_id']").hidden = !step.session_id;
  }

  // On a wide window the page makes room for the panel (and the charts take the new width);
  // on a narrow one the panel lies over it.
  function showPanel(open) {
    panel.hidden = !open;
    document.body.classList.toggle("step-open", open);
    A.fitWidth();
  }

  function select(stepId) {
    state.selected = stepId;
    state.cursor = stepId;
    if (panel.hidden) { showPanel(true); }
    document.getElementById("step-title").textContent = stepId;
    document.getElementById("step-loading").textContent = "Loading…";
    highlight(stepId);
    updateToggle();
    return A.fetchJSON(cfg.step + encodeURIComponent(stepId) + ".json" + (cfg.project ? "?project=" + encodeURIComponent(cfg.project) : ""))
      .then(function (step) { if (state.selected === stepId) { render(step); } })
      .catch(function (err) { document.getElementById("step-loading").textContent = "Could not load the step: " + err.message; });
  }

  function closePanel() {
    showPanel(false);
    state.selected = null;
    document.getElementById("chart-waterfall").focus({ preventScroll: true });
  }

  document.getElementById("step-close").addEventListener("click", closePanel);
  document.querySelectorAll(".copy-id").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var value = current && current[btn.dataset.copy], status = document.getElementById("copy-status");
      if (!value) { return; }
      var done = function () { status.textContent = "copied " + btn.dataset.copy.replace("_", " "); };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(value).then(done, function () { status.textContent = value; });
      } else { status.textContent = value; }
    });
  });

  // --- keyboard: j / k move the cursor along the visible rows, Enter opens its step, Esc closes ---
  function visibleRows() {
    var chart = document.getElementById("chart-waterfall"), out = [];
    ((chart && chart.data) || []).forEach(function (t) {
      if (MARKERS.indexOf(t.name) >= 0 || !t.customdata) { return; }
      t.customdata.forEach(function (id, i) { if (typeof id === "string" && typeof t.y[i] === "number") { out[t.y[i]] = id; } });
    });
    return out.filter(function (id) { return id !== undefined; });
  }

  function move(by) {
    var rows = visibleRows();
    if (!rows.length) { return; }
    var at = rows.indexOf(state.cursor || state.selected);
    var next = at < 0 ? (by > 0 ? 0 : rows.length - 1) : Math.max(0, Math.min(rows.length - 1, at + by));
    state.cursor = rows[next];
    highlight(state.cursor);
    scrollTo(state.cursor);
    if (!panel.hidden) { select(state.cursor); }
    document.body.dataset.cursor = state.cursor;
  }

  document.addEventListener("keydown", function (ev) {
    var t = ev.target, tag = t && t.tagName;
    if (ev.altKey || ev.ctrlKey || ev.metaKey || tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (t && t.isContentEditable)) { return; }
    if (ev.key === "Escape" && !panel.hidden) { ev.preventDefault(); closePanel(); }
    else if (ev.key === "j") { ev.preventDefault(); move(1); }
    else if (ev.key === "k") { ev.preventDefault(); move(-1); }
    else if (ev.key === "Enter" && state.cursor && (tag === "BODY" || t.id === "chart-waterfall")) { ev.preventDefault(); select(state.cursor); }
  });

  function reveal(stepId) {
    state.selected = stepId;
    if (rowOf(stepId) === null) { load(stepId).then(function () { select(stepId); }); } else { select(stepId); }
  }

  toggleBtn.addEventListener("click", function () {
    var id = state.selected, i = state.toggled.indexOf(id);
    if (i >= 0) { state.toggled.splice(i, 1); } else { state.toggled.push(id); }
    load();
  });
  document.getElementById("expand-all").addEventListener("click", function () { state.mode = "all"; state.toggled = []; load(); });
  document.getElementById("collapse-top").addEventListener("click", function () { state.mode = "top"; state.toggled = []; load(); });
  document.querySelectorAll("a.step-link").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      ev.preventDefault();
      history.replaceState(null, "", "#step=" + encodeURIComponent(a.dataset.step));
      reveal(a.dataset.step);
      document.getElementById("chart-waterfall").scrollIntoView({ behavior: "smooth" });
    });
  });

  // Find steps (name, tool, model, device, key:value attribute, text of arguments or errors):
  // the server lists the matches in time order; each is revealed, highlighted and scrolled to.
  var found = { ids: [], at: -1 };
  var findStatus = document.getElementById("find-status"), findNext = document.getElementById("find-next");

  function scrollTo(stepId) {
    var el = document.getElementById("chart-waterfall"), y = rowOf(stepId), ax = el._fullLayout && el._fullLayout.yaxis;
    if (y === null || !ax) { return; }
    var rows = (el.layout.meta || {}).visible || 0;
    if (rows > 60) { Plotly.relayout(el, { "yaxis.range": [y + 20, y - 20] }); }
    var top = el.getBoundingClientRect().top + window.scrollY + ax._offset + ax.l2p(y);
    window.scrollTo({ top: Math.max(0, top - window.innerHeight / 3), behavior: "smooth" });
  }

  function showMatch(i) {
    found.at = (i + found.ids.length) % found.ids.length;
    var id = found.ids[found.at];
    findStatus.textContent = (found.at + 1) + " of " + found.ids.length + (found.truncated ? "+" : "") + ": " + id;
    history.replaceState(null, "", "#step=" + encodeURIComponent(id));
    state.selected = id;
    var ready = rowOf(id) === null ? load(id) : Promise.resolve();
    ready.then(function () { select(id); scrollTo(id); });
  }

  document.getElementById("find-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var q = document.getElementById("find-steps").value.trim();
    if (!q) { return; }
    findStatus.textContent = "Searching…";
    A.fetchJSON(cfg.search + (cfg.search.indexOf("?") >= 0 ? "&" : "?") + "q=" + encodeURIComponent(q)).then(function (body) {
      found = { ids: body.step_ids || [], at: -1, truncated: body.truncated };
      findNext.hidden = found.ids.length < 2;
      if (found.ids.length) { showMatch(0); } else { findStatus.textContent = "no step matches"; }
    }).catch(function (err) { findStatus.textContent = err.message; });
  });
  findNext.addEventListener("click", function () { if (found.ids.length) { showMatch(found.at + 1); } });

  // A running task: every few seconds ask whether steps arrived (or it ended), and redraw.
  if (cfg.running && cfg.live) {
    var seen = null, marker = document.getElementById("running-marker");
    var poll = setInterval(function () {
      A.fetchJSON(cfg.live).then(function (live) {
        var key = live.steps + "|" + live.last_event_at;
        var changed = seen === null ? live.steps !== cfg.steps : key !== seen;
        seen = key;
        if (!live.running) {
          clearInterval(poll);
          if (marker) { marker.textContent = live.status || "ended"; marker.className = "status status-" + (live.status || "unknown"); }
          document.body.dataset.taskRunning = "0";
        }
        if (changed || !live.running) { load(state.selected); }
      }).catch(function () { /* the next tick tries again */ });
    }, 3000);
    document.body.dataset.taskRunning = "1";
  }

  var fromHash = /^#step=(.+)$/.exec(window.location.hash);
  var initial = fromHash ? decodeURIComponent(fromHash[1]) : null;
  load(initial).then(function () { if (initial) { select(initial); } });
})();
