// Servers and devices: the figures made from what the page read come in its config (server-side
// breakdown, TTFT/TPOT ECDFs); the telemetry small multiples are fetched at once and drawn when
// the reader comes near them (agentops.drawWhenNear), as the charts below them are. Each chart
// says data-drawn="1" when drawn; body[data-charts-ready] says when all are.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  var figures = cfg.figures || {};
  var drawn = Object.keys(figures).map(function (k) { return A.drawWhenNear("chart-" + k, figures[k]); });
  var fetched = A.fetchJSON(cfg.charts).then(function (figs) {
    return Promise.all(Object.keys(figs).map(function (k) { return A.drawWhenNear("chart-" + k, figs[k]); }));
  });
  Promise.all(drawn.concat([fetched])).then(function () {
    document.body.setAttribute("data-charts-ready", "1");
  }).catch(function (err) {
    A.fail(["chart-telemetry"], err);
    document.body.setAttribute("data-charts-ready", "error");
  });
})();
