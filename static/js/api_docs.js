// /api/docs: Swagger UI (vendored, static/vendor/swagger-ui/) over the OpenAPI document.
(function () {
  "use strict";
  var cfg = JSON.parse(document.getElementById("page-config").textContent);
  window.ui = window.SwaggerUIBundle({
    url: cfg.schema, dom_id: "#swagger-ui", deepLinking: true, validatorUrl: null,
    onComplete: function () { document.body.dataset.docsReady = "1"; }
  });
})();
