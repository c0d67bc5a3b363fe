// Shared by every page: auto-submitting filter selects, and the helpers the page scripts use
// to fetch chart JSON, draw it with the vendored Plotly and build drill-down links.
(function () {
  "use strict";
  document.querySelectorAll("select[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });

  function config() {
    var el = document.getElementById("page-config");
    return el ? JSON.parse(el.textContent) : {};
  }

  function fetchJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        return r.json().then(function (body) {
          if (!r.ok) { throw new Error(body.error || ("HTTP " + r.status)); }
          return body;
        });
      });
  }

  // Not `responsive`: it sizes a chart's height from its container on every resize, and our
  // containers take their height from the chart, so each resize collapsed every chart to its
  // border (~12 px) for good. Width follows the window (fitWidth below); height is the figure's.
  var plotConfig = { displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function draw(id, figure) {
    var el = document.getElementById(id);
    if (!el || !figure) { return Promise.resolve(null); }
    return Plotly.react(el, figure.data, figure.layout, plotConfig).then(function () { return el; });
  }

  function fail(ids, err) {
    ids.forEach(function (id) {
      var el = document.getElementById(id);
      if (el) { el.textContent = "Could not load this chart: " + err.message; el.classList.add("error"); }
    });
  }

  // A /tasks URL keeping the page's filters, with overrides (null removes a parameter).
  function tasksUrl(base, params, overrides) {
    var q = new URLSearchParams(params || {});
    q.delete("cursor");
    Object.keys(overrides).forEach(function (k) {
      var v = overrides[k];
      if (v === null || v === undefined || v === "") { q.delete(k); } else { q.set(k, String(v)); }
    });
    if (overrides.since || overrides.until) { q.delete("range"); }
    return base + "?" + q.toString();
  }

  function onClick(id, handler) {
    var el = document.getElementById(id);
    if (el && el.on) { el.on("plotly_click", function (ev) { if (ev.points && ev.points.length) { handler(ev.points[0]); } }); }
  }

  // Every chart on the page (drawn here or by a page's own script) takes its container's new
  // width after the window settles; a height-only change (a full-page screenshot) moves nothing.
  var resizeTimer = null;
  function fitWidth() {
    document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
      var width = gd.clientWidth, full = gd._fullLayout;
      if (width && full && Math.abs(full.width - width) > 1) { Plotly.relayout(gd, { width: width }); }
    });
  }
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(fitWidth, 150);
  });

  window.agentops = { config: config, fetchJSON: fetchJSON, draw: draw, fail: fail, tasksUrl: tasksUrl, onClick: onClick };
})();
