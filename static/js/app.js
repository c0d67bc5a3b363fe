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
    figure = localizeFigure(figure);
    return Plotly.react(el, figure.data, figure.layout, plotConfig).then(function () { return el; });
  }

  // --- numbers and units: the twin of analysis/units.py (tests/analysis/test_units.py holds
  // the cases both give) ---
  function trim(text) { return text.indexOf(".") >= 0 ? text.replace(/0+$/, "").replace(/\.$/, "") : text; }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || typeof ms !== "number" || !isFinite(ms)) { return "–"; }
    if (ms === 0) { return "0 ms"; }
    var sign = ms < 0 ? "-" : "", v = Math.abs(ms), unit = "ms";
    if (Math.round(v) >= 1000) { v = v / 1000; unit = "s"; }
    // Three significant digits (at most two decimals), counted after rounding: 9.996 is "10".
    var digits = Math.round(v * 100) / 100 < 10 ? 2 : Math.round(v * 10) / 10 < 100 ? 1 : 0;
    return sign + trim(v.toFixed(digits)) + " " + unit;
  }

  // A time axis in ms that zooms (the waterfall, two tasks compared): ticks at a 1-2-5 step over
  // the visible range, labelled by fmtMs, recomputed after every zoom or pan.
  function msTicks(lo, hi) {
    var raw = (hi - lo) / 6;
    if (!(raw > 0)) { return []; }
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * power; }).filter(function (s) { return s >= raw; })[0];
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) { out.push(Math.round(v / step) * step); }
    return out;
  }
  function msAxis(gd) {
    if (!gd || !gd._fullLayout) { return; }
    function retick() {
      var ax = gd._fullLayout.xaxis;
      if (!ax || ax.type !== "linear" || !ax.range) { return; }
      var vals = msTicks(Math.min(ax.range[0], ax.range[1]), Math.max(ax.range[0], ax.range[1]));
      Plotly.relayout(gd, { "xaxis.tickmode": "array", "xaxis.tickvals": vals, "xaxis.ticktext": vals.map(fmtMs) });
    }
    if (!gd._msAxisBound) {
      gd._msAxisBound = true;
      gd.on("plotly_relayout", function (ev) {
        if (Object.keys(ev || {}).some(function (k) { return /^xaxis\.(range|autorange)/.test(k); })) { retick(); }
      });
    }
    retick();
  }

  function fmtValue(value, unit) {
    if (value === null || value === undefined || !isFinite(value)) { return "–"; }
    if (unit === "ms") { return fmtMs(value); }
    if (unit === "ms/token") { return fmtMs(value) + "/token"; }
    if (unit === "% change") { return (value >= 0 ? "+" : "") + value.toFixed(1) + " % change"; }
    if (unit === "%") { return value.toFixed(1) + " %"; }
    var text = trim(value.toLocaleString("en-US", { minimumFractionDigits: 3, maximumFractionDigits: 3 }));
    return (text + " " + (unit || "")).trim();
  }

  // --- timestamps: UTC by default, local on request (remembered); every <time data-ts> on the
  // page and the date axes of charts drawn after the switch follow it ---
  var TZ_KEY = "agentops.timezone";
  function tzMode() {
    try { return window.localStorage.getItem(TZ_KEY) === "local" ? "local" : "utc"; } catch (e) { return "utc"; }
  }
  function localZone() {
    try {
      var part = new Intl.DateTimeFormat("en-US", { timeZoneName: "short" }).formatToParts(new Date())
        .filter(function (p) { return p.type === "timeZoneName"; })[0];
      return part ? part.value : "local";
    } catch (e) { return "local"; }
  }
  function pad(n, w) { n = String(n); while (n.length < (w || 2)) { n = "0" + n; } return n; }
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

  // The instant's fields in the chosen zone: [year, month 1-12, day, hour, minute, second, ms].
  function fields(d, mode) {
    return mode === "local"
      ? [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds(), d.getMilliseconds()]
      : [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds(), d.getUTCMilliseconds()];
  }

  function fmtTs(value, precision, mode) {
    var d = value instanceof Date ? value : new Date(value);
    if (isNaN(d.getTime())) { return "–"; }
    mode = mode || tzMode();
    var f = fields(d, mode), date = f[0] + "-" + pad(f[1]) + "-" + pad(f[2]);
    var hm = pad(f[3]) + ":" + pad(f[4]), hms = hm + ":" + pad(f[5]), text;
    if (precision === "minute") { text = date + " " + hm; }
    else if (precision === "ms") { text = date + " " + hms + "." + pad(f[6], 3); }
    else if (precision === "time") { text = hms; }
    else if (precision === "short") { text = MONTHS[f[1] - 1] + " " + pad(f[2]) + " " + hm; }
    else { text = date + " " + hms; }
    return text + " " + (mode === "local" ? localZone() : "UTC");
  }

  function applyTimezone() {
    var mode = tzMode();
    document.querySelectorAll("time[data-ts]").forEach(function (el) {
      el.textContent = fmtTs(el.getAttribute("datetime"), el.dataset.ts, mode);
      el.title = fmtTs(el.getAttribute("datetime"), "ms", mode === "local" ? "utc" : "local");
    });
    var btn = document.getElementById("tz-switch");
    if (btn) {
      btn.textContent = mode === "local" ? "times: local (" + localZone() + ")" : "times: UTC";
      btn.setAttribute("aria-pressed", mode === "local" ? "true" : "false");
    }
    document.documentElement.dataset.timezone = mode;
  }

  // Chart date axes: Plotly drops an ISO string's offset and draws its wall clock, which the
  // server sends in UTC. In local mode the x values of date traces become local wall clock, and
  // the axis title says which zone it is. customdata (the click handlers' raw values) is untouched.
  var ISO = /^\d{4}-\d\d-\d\d[T ]\d\d:\d\d/;
  function localWall(v) {
    if (typeof v !== "string" || !ISO.test(v)) { return v; }
    var d = new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(v) ? v : v.replace(" ", "T") + "Z");
    if (isNaN(d.getTime())) { return v; }
    var f = fields(d, "local");
    return f[0] + "-" + pad(f[1]) + "-" + pad(f[2]) + " " + pad(f[3]) + ":" + pad(f[4]) + ":" + pad(f[5]) + "." + pad(f[6], 3);
  }
  function localizeFigure(figure) {
    var mode = tzMode(), layout = figure.layout || {}, dated = {};
    function isoArray(values) {
      var first = (values || []).filter(function (v) { return v !== null && v !== undefined; })[0];
      return typeof first === "string" && ISO.test(first);
    }
    Object.keys(layout).forEach(function (key) {
      if (/^xaxis\d*$/.test(key) && layout[key] && layout[key].type === "date") { dated[key] = true; }
    });
    (figure.data || []).forEach(function (t) {
      if (isoArray(t.x) || isoArray(t.base)) { dated[(t.xaxis || "x").replace(/^x/, "xaxis")] = true; }
    });
    var axes = Object.keys(dated);
    if (!axes.length) { return figure; }
    var zone = mode === "local" ? localZone() : "UTC";
    // Small multiples share their time axes: the zone goes under the lowest row only, not under
    // every chart (where it read as the title of the row below).
    function bottom(key) {
      var anchor = layout[(layout[key] && layout[key].anchor) ? layout[key].anchor.replace(/^y/, "yaxis") : "yaxis"];
      return anchor && anchor.domain ? anchor.domain[0] : 0;
    }
    var lowest = Math.min.apply(null, axes.map(bottom));
    var captioned = axes.filter(function (key) { return bottom(key) <= lowest + 1e-9; });
    var data = figure.data.map(function (t) {
      var key = (t.xaxis || "x").replace(/^x/, "xaxis");
      if (mode !== "local" || !dated[key]) { return t; }
      var out = Object.assign({}, t);
      if (isoArray(t.x)) { out.x = t.x.map(localWall); }
      if (isoArray(t.base)) { out.base = t.base.map(localWall); }
      return out;
    });
    var out = Object.assign({}, layout);
    axes.forEach(function (key) {
      var ax = Object.assign({}, out[key] || {});
      var title = ax.title && typeof ax.title === "object" ? ax.title.text : ax.title;
      if (captioned.indexOf(key) >= 0) {
        ax.title = Object.assign({}, typeof ax.title === "object" ? ax.title : {}, { text: (title ? title + " " : "") + "(" + zone + ")" });
      }
      if (mode === "local" && Array.isArray(ax.range)) { ax.range = ax.range.map(localWall); }
      out[key] = ax;
    });
    return { data: data, layout: out };
  }

  var tzButton = document.getElementById("tz-switch");
  if (tzButton) {
    tzButton.hidden = false;
    tzButton.addEventListener("click", function () {
      try { window.localStorage.setItem(TZ_KEY, tzMode() === "local" ? "utc" : "local"); } catch (e) { /* private mode */ }
      // Text follows at once; charts are drawn from the server's figures, so the page redraws them.
      applyTimezone();
      if (document.querySelector(".js-plotly-plot")) { window.location.reload(); }
    });
  }
  applyTimezone();

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

  // A chart far below the fold is drawn once the reader comes within NEAR_PX of it (or has
  // scrolled past it), so what the page shows first is drawn first: the devices page's 36 small
  // multiples took a browser ~0.8 s to lay out, before anyone could see them.
  var NEAR_PX = 150;
  function whenNear(el) {
    return new Promise(function (resolve) {
      function near() { return !el || el.getBoundingClientRect().top < window.innerHeight + NEAR_PX; }
      if (near()) { resolve(); return; }
      function check() {
        if (!near()) { return; }
        window.removeEventListener("scroll", check);
        window.removeEventListener("resize", check);
        resolve();
      }
      window.addEventListener("scroll", check, { passive: true });
      window.addEventListener("resize", check);
    });
  }
  function drawWhenNear(id, figure) {
    var el = document.getElementById(id);
    return whenNear(el).then(function () { return draw(id, figure); }).then(function (drawn) {
      if (el) { el.setAttribute("data-drawn", "1"); }
      return drawn;
    });
  }

  window.agentops = { config: config, fetchJSON: fetchJSON, draw: draw, drawWhenNear: drawWhenNear, fail: fail, tasksUrl: tasksUrl, onClick: onClick,
    fitWidth: fitWidth, msAxis: msAxis, fmtMs: fmtMs, fmtValue: fmtValue, fmtTs: fmtTs, timezone: tzMode, applyTimezone: applyTimezone,
    localizeFigure: localizeFigure };
})();
