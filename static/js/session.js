// Session page: the waterfall of turns (its figure is in the page, built by the server);
// clicking a turn opens its task.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  var figure = JSON.parse(document.getElementById("session-figure").textContent);
  A.draw("chart-session", figure).then(function (el) {
    if (el && el.on) {
      el.on("plotly_click", function (ev) {
        var pt = ev.points && ev.points[0];
        if (pt && typeof pt.customdata === "string") {
          window.location.href = cfg.task_url + "/" + encodeURIComponent(pt.customdata) + (cfg.query ? "?" + cfg.query : "");
        }
      });
    }
    document.body.dataset.sessionReady = "1";
  }).catch(function (err) { A.fail(["chart-session"], err); });
})();
