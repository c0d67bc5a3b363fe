// Devices: TTFT/TPOT distributions and telemetry over time.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  A.fetchJSON(cfg.charts).then(function (figs) {
    return Promise.all(Object.keys(figs).map(function (k) { return A.draw("chart-" + k, figs[k]); }));
  }).catch(function (err) { A.fail(["chart-ttft", "chart-tpot", "chart-telemetry"], err); });
})();
