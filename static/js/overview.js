// Overview: draws the charts; a click on a percentile point or a finding bar lists the tasks behind it.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  var ids = ["chart-volume", "chart-errors", "chart-percentiles", "chart-findings", "chart-budget"];
  A.fetchJSON(cfg.charts).then(function (figs) {
    return Promise.all(Object.keys(figs).map(function (k) { return A.draw("chart-" + k, figs[k]); }));
  }).then(function () {
    A.onClick("chart-percentiles", function (pt) {
      var d = pt.customdata;
      if (!d || d[3] === null) { return; }
      window.location.href = A.tasksUrl(cfg.tasks, cfg.params, {
        release: d[0] === "(other)" ? null : (d[0] || null), since: d[1], until: d[2],
        min_duration_ms: d[3], sort: "-duration_ms" });
    });
    A.onClick("chart-findings", function (pt) {
      window.location.href = A.tasksUrl(cfg.tasks, cfg.params, { finding: pt.customdata, sort: "-duration_ms" });
    });
  }).catch(function (err) { A.fail(ids, err); });
})();
