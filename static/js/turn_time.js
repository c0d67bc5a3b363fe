// Overview: time per user turn (sessions), fetched after the page renders; shown only when the
// range has sessions. Numbers arrive formatted and are set as text.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config(), section = document.getElementById("turn-time");
  if (!section || !cfg.turn_time) { return; }
  A.fetchJSON(cfg.turn_time).then(function (found) {
    if (!found.sessions) { return; }
    section.querySelectorAll("[data-field]").forEach(function (el) {
      el.textContent = found.text[el.dataset.field];
      if (/^p\d+$/.test(el.dataset.field)) { el.className = "approx"; el.title = found.approximate; }
    });
    section.hidden = false;
  }).catch(function () { /* the rest of the overview stands without it */ });
})();
