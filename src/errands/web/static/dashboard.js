// errands dashboard: live updates without reloading the page, and copyable commands.
// Served from /static (the Content-Security-Policy allows no inline script). Pages whose
// <body data-live="1"> are refetched every 5 s; the #live region is swapped for the new one.
// The fetched HTML was escaped by the server; it is parsed with DOMParser, whose documents
// never run scripts, and moved in as nodes. When the session has ended (the refetch lands on
// the login page, or is refused) the page stops refreshing and says so, rather than keep
// claiming to be live over frozen data.
(function () {
  "use strict";
  var PERIOD_MS = 5000;
  var status = null;
  var timer = null;

  function busy() {
    var el = document.activeElement;
    if (el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA")) {
      return true;
    }
    // Ticked rows would be lost by a refresh: hold still until they are acted on or cleared.
    if (document.querySelector("#live input[type=checkbox]:checked") !== null) {
      return true;
    }
    // So would a form half filled in (a limit's new caps, a pause reason, a signal's payload).
    var fields = document.querySelectorAll("#live input:not([type=hidden]), #live textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].type !== "checkbox" && fields[i].value !== fields[i].defaultValue) {
        return true;
      }
    }
    return false;
  }

  function say(text, ended) {
    if (status) {
      status.textContent = text;
      status.classList.toggle("ended", !!ended);
    }
  }

  function stop(text) {
    if (timer !== null) {
      window.clearInterval(timer);
      timer = null;
    }
    document.body.dataset.live = "0";
    say(text, true);
  }

  function loginPage(response) {
    var login = document.body.dataset.login;
    if (!login) {
      return false;
    }
    var path = new URL(login, window.location.href).pathname;
    return response.redirected && new URL(response.url).pathname === path;
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
        if (response.status === 401 || response.status === 403 || loginPage(response)) {
          stop("session ended: not refreshing; reload the page to log in again");
          return null;
        }
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (!fresh) {
          stop("stopped: this page no longer answers; reload it");
          return;
        }
        current.replaceWith(document.adoptNode(fresh));
        say("live: updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (err) {
        say("live: paused (" + err.message + "); retrying", false);
      });
  }

  function copy(event) {
    var el = event.target.closest ? event.target.closest("[data-copy]") : null;
    if (!el || !navigator.clipboard) {
      return;
    }
    navigator.clipboard.writeText(el.dataset.copy).then(function () {
      el.classList.add("copied");
      el.title = "copied";
    });
  }

  // A destructive action asks first: data-confirm on the form, or on the button pressed.
  function confirmSubmit(event) {
    var button = event.submitter;
    var text = (button && button.dataset.confirm) || event.target.dataset.confirm;
    if (text && !window.confirm(text)) {
      event.preventDefault();
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    status = document.getElementById("live-status");
    document.addEventListener("click", copy);
    document.addEventListener("submit", confirmSubmit);
    if (document.body.dataset.live === "1") {
      timer = window.setInterval(refresh, PERIOD_MS);
    }
  });
})();
