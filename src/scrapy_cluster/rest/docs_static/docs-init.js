// Starts Swagger UI (swagger-ui-bundle.js, loaded just before) on /docs with the configuration
// the page carries in the data-config attribute of #swagger-ui (api_docs.py writes it). The
// page has no inline script, so its Content-Security-Policy can say script-src 'self'.
"use strict";
(function () {
  var root = document.getElementById("swagger-ui");
  var config = JSON.parse(root.getAttribute("data-config"));
  config.presets = [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset];
  window.ui = SwaggerUIBundle(config);
})();
