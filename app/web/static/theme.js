// Runs before first paint (loaded in <head>): apply the theme the user picked, if any.
(function () {
  try {
    var t = localStorage.getItem("lt-theme");
    if (t === "light" || t === "dark") document.documentElement.setAttribute("data-theme", t);
  } catch (e) { /* storage blocked: follow the system */ }
})();
