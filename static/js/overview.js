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

  // Token cost: fetched apart, as it sums every LLM step in range. Release and model names are
  // trace content: set as text, never as markup.
  A.fetchJSON(cfg.cost).then(function (cost) {
    document.querySelector("#kpi-cost b").textContent = cost.total;
    document.getElementById("kpi-cost").title = cost.title || "";
    if (cost.per_task) {
      document.querySelector("#kpi-cost-per-task b").textContent = cost.per_task;
      document.getElementById("kpi-cost-per-task").hidden = false;
    }
    var body = document.querySelector("#cost-by-release tbody");
    cost.releases.forEach(function (r) {
      var tr = document.createElement("tr");
      [r.release, String(r.tasks), r.cost, r.per_task, r.per_llm_step].forEach(function (text, i) {
        var td = document.createElement("td");
        td.textContent = text;
        if (i > 0) { td.className = "num"; }
        if (i === 2) { td.title = r.title || ""; }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    document.getElementById("cost-by-release-section").hidden = cost.releases.length === 0;
  }).catch(function () { document.querySelector("#kpi-cost b").textContent = "unavailable"; });
})();
