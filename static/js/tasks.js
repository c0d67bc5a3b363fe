// Tasks: the Model and Tool boxes suggest the project's known values (GET /api/v1/search/values),
// fetched the first time a box is used and narrowed as it is typed in. Values are trace content:
// set as option values (text), never as markup.
(function () {
  "use strict";
  var A = window.agentops, cfg = A.config();
  if (!cfg.values) { return; }
  document.querySelectorAll("input[data-values]").forEach(function (input) {
    var list = document.getElementById(input.getAttribute("list")), asked = null, timer = null;
    function fill() {
      var text = input.value;
      if (text === asked) { return; }
      asked = text;
      var sep = cfg.values.indexOf("?") < 0 ? "?" : "&";
      var url = cfg.values + sep + new URLSearchParams({ field: input.dataset.values, q: text }).toString();
      A.fetchJSON(url).then(function (body) {
        if (asked !== text) { return; }  // a newer request is on its way
        list.replaceChildren.apply(list, body.values.map(function (v) {
          var option = document.createElement("option");
          option.value = v;
          return option;
        }));
        input.dataset.suggested = String(body.values.length);
      }).catch(function () { asked = null; });
    }
    input.addEventListener("focus", fill);
    input.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(fill, 150); });
  });
})();
