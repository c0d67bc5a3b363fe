// Servers and devices: telemetry small multiples, the server-side breakdown and the TTFT/TPOT
// ECDFs, fetched as one chart JSON for the page's hosts. body[data-charts-ready] says when drawn.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  var ids = ["chart-telemetry", "chart-serving", "chart-ttft", "chart-tpot"];
  A.fetchJSON(cfg.charts).then(function (figs) {
    return Promise.all(Object.keys(figs).map(function (k) { return A.draw("chart-" + k, figs[k]); }));
  }).then(function () {
    document.body.setAttribute("data-charts-ready", "1");
  }).catch(function (err) {
    A.fail(ids, err);
    document.body.setAttribute("data-charts-ready", "error");
  });
})();
