// Two tasks side by side: fetch the aligned rows' figure and draw it; clicking a row shows its
// two step ids as text (never as HTML) with links to each task's step.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  var status = document.getElementById("compare-status");
  var t0 = performance.now();
  A.fetchJSON(cfg.compare).then(function (body) {
    var t1 = performance.now();
    return A.draw("chart-compare", body.figure).then(function (el) {
      A.msAxis(el);
      var meta = body.figure.layout.meta || {};
      status.textContent = (meta.rows || 0) + " aligned steps" + (meta.webgl ? " (WebGL)" : "") +
        " · drawn in " + A.fmtMs(performance.now() - t0);
      window.agentopsTiming = { fetchMs: t1 - t0, drawMs: performance.now() - t1 };
      if (el && el.on) {
        el.on("plotly_click", function (ev) {
          var pt = ev.points && ev.points[0];
          if (!pt || !pt.customdata) { return; }
          var pre = document.getElementById("compare-row");
          pre.hidden = false;
          pre.textContent = "this task: " + (pt.customdata[0] || "(none)") + "\nthe other: " + (pt.customdata[1] || "(none)");
        });
      }
      document.body.dataset.compareReady = "1";
    });
  }).catch(function (err) { A.fail(["chart-compare"], err); status.textContent = ""; });
})();
