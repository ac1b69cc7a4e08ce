// Starts Swagger UI on /openapi.json (a file, not an inline script: the pages' CSP allows no inline code).
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
