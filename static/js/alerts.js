// Alerts pages: draws a rule's chart, previews the form's metric live, confirms deletion.
// Progressive enhancement: every page works without it (the form still posts and validates).
(function () {
  "use strict";

  function draw(el, figure) {
    el.textContent = "";
    if (window.Plotly) {
      figure = window.agentops.localizeFigure(figure);
      window.Plotly.react(el, figure.data, figure.layout, { displayModeBar: false });
    }
  }

  function say(el, text, isError) {
    el.textContent = text;
    el.className = isError ? "error" : "muted";
  }

  // Rule detail: the chart container names its JSON.
  var chart = document.getElementById("alert-chart");
  if (chart && chart.dataset.url) {
    fetch(chart.dataset.url, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (body) { draw(chart, body.figure); })
      .catch(function (err) { say(chart, "The chart could not be loaded (" + err.message + ").", true); });
  }

  // Delete buttons ask first.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); }
    });
  });

  // Rule form: units follow the metric, dependent fields show only when they apply, and the
  // preview redraws (debounced) whenever a field changes.
  var form = document.getElementById("alert-form");
  if (!form) { return; }
  var units = JSON.parse(document.getElementById("metric-units").textContent);
  var status = document.getElementById("preview-status");
  var previewChart = document.getElementById("preview-chart");
  var timer = null;
  var sequence = 0;

  function field(name) { return form.elements.namedItem(name); }

  function refreshFields() {
    var metric = field("metric").value;
    var baseline = field("baseline").value;
    var isFinding = metric === "finding_rate" || metric === "wasted_share";
    form.querySelectorAll(".finding-only").forEach(function (el) { el.hidden = !isFinding; });
    form.querySelectorAll(".release-only").forEach(function (el) { el.hidden = baseline !== "release"; });
    document.getElementById("threshold-unit").textContent =
      baseline === "none" ? (units[metric] || "") : "% change vs baseline";
  }

  function preview() {
    var params = new URLSearchParams(new FormData(form));
    params.delete("csrfmiddlewaretoken");
    params.delete("webhook_secret");
    params.set("project", form.dataset.project);
    var mine = ++sequence;
    say(status, "Measuring…", false);
    fetch(form.dataset.previewUrl + "?" + params.toString(), { credentials: "same-origin" })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
      .then(function (res) {
        if (mine !== sequence) { return; }
        if (!res.ok) {
          var errors = res.body.errors || {};
          var first = Object.keys(errors)[0];
          say(status, first ? first + ": " + errors[first] : "The preview failed.", true);
          return;
        }
        var now = res.body.now;
        if (!now.enough_samples) {
          say(status, "Now: not enough data (" + now.sample_count + " samples in the window).", false);
        } else {
          say(status, "Now: " + window.agentops.fmtValue(now.value, now.unit) + " from " + now.sample_count +
            " samples — " + (now.breaching ? "this rule would be breaching." : "within the threshold."),
            now.breaching);
        }
        draw(previewChart, res.body.figure);
      })
      .catch(function (err) { if (mine === sequence) { say(status, "The preview failed (" + err.message + ").", true); } });
  }

  function schedule() {
    refreshFields();
    clearTimeout(timer);
    timer = setTimeout(preview, 400);
  }

  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  refreshFields();
  if (field("threshold").value) { preview(); }
})();
