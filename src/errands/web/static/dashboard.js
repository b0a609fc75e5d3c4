// errands dashboard: live updates without reloading the page, and confirmation of actions.
// Served from /static (the Content-Security-Policy allows no inline script). Pages whose
// <body data-live="1"> are refetched every 5 s; the #live region is swapped for the new one.
// The fetched HTML was escaped by the server; it is parsed with DOMParser, whose documents
// never run scripts, and moved in as nodes.
(function () {
  "use strict";
  var PERIOD_MS = 5000;
  var status = null;

  function busy() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA");
  }

  function refresh() {
    if (document.body.dataset.live !== "1" || document.hidden || busy()) {
      return;
    }
    var current = document.getElementById("live");
    if (!current) {
      return;
    }
    fetch(window.location.href, {
      credentials: "same-origin",
      headers: { "X-Requested-With": "errands-live" },
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (fresh) {
          current.replaceWith(document.adoptNode(fresh));
          if (status) {
            status.textContent = "live: updated " + new Date().toLocaleTimeString();
          }
        }
      })
      .catch(function (err) {
        if (status) {
          status.textContent = "live: paused (" + err.message + ")";
        }
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    status = document.getElementById("live-status");
    if (document.body.dataset.live === "1") {
      window.setInterval(refresh, PERIOD_MS);
    }
  });
})();
