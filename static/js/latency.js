// Latency: histograms and ECDFs; a click on a task-duration bucket lists the tasks in it.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  var ids = ["chart-task_histogram", "chart-task_ecdf", "chart-group_histogram", "chart-group_ecdf"];
  A.fetchJSON(cfg.charts).then(function (figs) {
    return Promise.all(Object.keys(figs).map(function (k) { return A.draw("chart-" + k, figs[k]); }));
  }).then(function () {
    A.onClick("chart-task_histogram", function (pt) {
      var d = pt.customdata;
      if (!d) { return; }
      window.location.href = A.tasksUrl(cfg.tasks, cfg.params, {
        min_duration_ms: d[0], max_duration_ms: d[1], sort: "-duration_ms" });
    });
    document.body.dataset.chartsReady = "1";
  }).catch(function (err) { A.fail(ids, err); });
})();
