// Draws the release comparison figures embedded by the page (json_script), with vendored Plotly.
(function () {
  "use strict";
  var node = document.getElementById("release-figures");
  if (!node || !window.Plotly) return;
  var figures = JSON.parse(node.textContent);
  var config = { displaylogo: false };
  [["ecdf", "chart-ecdf"], ["histogram", "chart-histogram"], ["contribution", "chart-contribution"]]
    .forEach(function (pair) {
      var figure = figures[pair[0]];
      var target = document.getElementById(pair[1]);
      if (!figure || !target) return;
      if (!figure.data.length) { target.textContent = "No tasks to plot."; return; }
      window.Plotly.newPlot(target, figure.data, figure.layout, config);
    });
})();
