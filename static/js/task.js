// Task detail: the waterfall (with its device lane), collapse/expand of subtrees, and the raw
// fields of the selected step. The server builds the figure; this file keeps the open/closed
// state, asks for the figure again when it changes, and shows step details as plain text.
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

  function select(stepId) {
    state.selected = stepId;
    var panel = document.getElementById("step-panel");
    var pre = document.getElementById("step-json");
    panel.hidden = false;
    document.getElementById("step-title").textContent = stepId;
    pre.textContent = "Loading…";
    highlight(stepId);
    updateToggle();
    A.fetchJSON(cfg.step + encodeURIComponent(stepId) + ".json" + (cfg.project ? "?project=" + encodeURIComponent(cfg.project) : ""))
      .then(function (step) {
        document.getElementById("step-title").textContent = (step.name || step.kind) + " (" + step.step_id + ")";
        pre.textContent = JSON.stringify(step, null, 2);
      })
      .catch(function (err) { pre.textContent = "Could not load the step: " + err.message; });
  }

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
